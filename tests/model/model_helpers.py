"""Shared helpers for the model tests: HF-name views of loaded weights, transformers loading,
and surgery on real safetensors files (to build broken checkpoints)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from evokernel.model.config import ModelConfig
from evokernel.model.weights import ModelWeights


def hf_view(w: ModelWeights, cfg: ModelConfig, name: str) -> torch.Tensor:
    """The part of our packed weights an HF tensor name corresponds to (written out by hand,
    independently of the loader's own table)."""
    q, kv, inter = cfg.q_size, cfg.kv_size, cfg.intermediate_size
    top = {
        "model.embed_tokens.weight": w.embed_tokens,
        "model.norm.weight": w.final_norm,
        "lm_head.weight": w.lm_head,
    }
    if name in top:
        return top[name]
    parts = name.split(".")
    layer = w.layers[int(parts[2])]
    suffix = ".".join(parts[3:])
    table = {
        "input_layernorm.weight": layer.input_norm,
        "self_attn.q_proj.weight": layer.qkv_proj[:q],
        "self_attn.k_proj.weight": layer.qkv_proj[q : q + kv],
        "self_attn.v_proj.weight": layer.qkv_proj[q + kv :],
        "self_attn.q_norm.weight": layer.q_norm,
        "self_attn.k_norm.weight": layer.k_norm,
        "self_attn.o_proj.weight": layer.o_proj,
        "post_attention_layernorm.weight": layer.post_attn_norm,
        "mlp.gate_proj.weight": layer.gate_up_proj[:inter],
        "mlp.up_proj.weight": layer.gate_up_proj[inter:],
        "mlp.down_proj.weight": layer.down_proj,
    }
    return table[suffix]


def hf_model(model_dir: Path, dtype: torch.dtype = torch.float32) -> tuple[Any, dict[str, Any]]:
    """transformers' model for `model_dir` and its loading info (missing/unexpected keys)."""
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype, output_loading_info=True
    )
    return model.eval(), info


def assert_matches_hf(model: Any, w: ModelWeights, cfg: ModelConfig) -> None:
    """Every parameter transformers loaded equals our weights at the right rows."""
    state = model.state_dict()
    assert state, "transformers loaded no parameters"
    for name, ref in state.items():
        ours = hf_view(w, cfg, name)
        assert ours.shape == ref.shape, name
        assert torch.equal(ours.to(ref.dtype), ref), f"{name}: values differ"


def edit_tensors(path: Path, **changes: torch.Tensor | None) -> None:
    """Rewrite a safetensors file with tensors replaced, added, or (None) removed.

    Keyword names use `__` for `.` (e.g. `model__norm__weight=None`).
    """
    tensors = load_file(path)
    for key, value in changes.items():
        name = key.replace("__", ".")
        if value is None:
            del tensors[name]
        else:
            tensors[name] = value
    save_file(tensors, str(path), metadata={"format": "pt"})


def edit_json(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def rewrite_header(path: Path, edit: Any) -> None:
    """Apply `edit(header_dict)` to a safetensors header in place (same length, space-padded)."""
    data = path.read_bytes()
    start, end = header_span(path)
    header = json.loads(data[start:end])
    edit(header)
    raw = json.dumps(header, separators=(",", ":")).encode()
    assert len(raw) <= end - start, "edited header is longer than the original"
    path.write_bytes(data[:start] + raw + b" " * (end - start - len(raw)) + data[end:])


def header_span(path: Path) -> tuple[int, int]:
    """(start, end) byte offsets of the JSON header inside a safetensors file."""
    n = int.from_bytes(path.read_bytes()[:8], "little")
    return 8, 8 + n


def vm_status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)
