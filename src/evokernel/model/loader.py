"""Checkpoint directory -> `ModelWeights` on a device, one tensor at a time (any family).

    cfg, weights = load_model(path, device="cuda", dtype=torch.bfloat16)
    weights = load_weights(path, cfg, device="cuda", dtype=torch.bfloat16)

The whole checkpoint is checked first (`inspect_checkpoint`: layout, headers, names, shapes,
dtypes), so a bad checkpoint fails with one `CheckpointError` line before any device memory is
taken. Then each tensor goes from a memory-mapped view of its file straight into its slice of
the destination (q/k/v rows into `qkv_proj`, gate/up rows into `gate_up_proj`), converted to
`dtype` on the way, and its mapped pages are dropped once copied: host RAM holds at most one
tensor of the file beyond what the destination itself takes (nothing, on a GPU).

Every tensor is checked for NaN and Inf as loaded, on the device (`finite.py`: one reduction
per tensor, one host sync at the end); non-finite weights are a `CheckpointError` naming them.

Tied embeddings: `weights.lm_head is weights.embed_tokens`. A tied config whose checkpoint
also stores a *different* `lm_head.weight` gets it as a separate head, as transformers 5 does
(see `checkpoint.py`); `lm_head is embed_tokens` then does not hold.
"""

from __future__ import annotations

from pathlib import Path

import torch

from evokernel.errors import ConfigError
from evokernel.model.checkpoint import Checkpoint, inspect_checkpoint
from evokernel.model.config import ModelConfig
from evokernel.model.finite import FiniteCheck
from evokernel.model.safetensors_io import Header, TensorEntry, TensorMap
from evokernel.model.weights import HF_TENSOR_MAP, LayerWeights, ModelWeights, hf_shapes

LOAD_DTYPES: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}


def load_model(
    model_dir: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.bfloat16,
) -> tuple[ModelConfig, ModelWeights]:
    """Read the config (eos ids merged from generation_config.json) and load the weights."""
    cfg = ModelConfig.from_dir(model_dir)
    return cfg, load_weights(model_dir, cfg, device, dtype)


def load_weights(
    model_dir: str | Path,
    cfg: ModelConfig,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.bfloat16,
) -> ModelWeights:
    """Check the checkpoint in `model_dir` against `cfg`, then copy it to `device` as `dtype`."""
    dt = resolve_dtype(dtype)
    ckpt = inspect_checkpoint(model_dir, cfg)
    if cfg.quantization is not None:  # packed projections (model/quant/)
        from evokernel.model.quant.load import load_quantized

        return load_quantized(ckpt, torch.device(device), dt)
    tied = ckpt.head_is_tied()
    weights = _allocate(cfg, torch.device(device), dt, tied)
    dest = _destinations(cfg, weights, tied)
    sources = dict(ckpt.tensors)
    if not tied and ckpt.stored_head is not None:
        sources["lm_head.weight"] = ckpt.stored_head
    _copy_all(ckpt, sources, dest)
    return weights


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype in LOAD_DTYPES.values():
            return dtype
    elif dtype.removeprefix("torch.") in LOAD_DTYPES:
        return LOAD_DTYPES[dtype.removeprefix("torch.")]
    raise ConfigError(f"unsupported weight dtype {dtype!r} (use {', '.join(LOAD_DTYPES)})")


def _allocate(
    cfg: ModelConfig, device: torch.device, dtype: torch.dtype, tied: bool
) -> ModelWeights:
    H, inter, D = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim

    def empty(*shape: int) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device=device)

    embed = empty(cfg.vocab_size, H)
    layers = [
        LayerWeights(
            input_norm=empty(H),
            qkv_proj=empty(cfg.q_size + 2 * cfg.kv_size, H),
            qkv_bias=empty(cfg.q_size + 2 * cfg.kv_size) if cfg.qkv_bias else None,
            q_norm=empty(D) if cfg.qk_norm else None,
            k_norm=empty(D) if cfg.qk_norm else None,
            o_proj=empty(H, cfg.q_size),
            post_attn_norm=empty(H),
            gate_up_proj=empty(2 * inter, H),
            down_proj=empty(H, inter),
        )
        for _ in range(cfg.num_hidden_layers)
    ]
    lm_head = embed if tied else empty(cfg.vocab_size, H)
    return ModelWeights(embed_tokens=embed, layers=layers, final_norm=empty(H), lm_head=lm_head)


def _destinations(cfg: ModelConfig, w: ModelWeights, tied: bool) -> dict[str, torch.Tensor]:
    """HF tensor name -> the slice of `w` it fills (a view, so copying into it fills `w`)."""
    q, kv, inter = cfg.q_size, cfg.kv_size, cfg.intermediate_size
    rows = {"q": (0, q), "k": (q, q + kv), "v": (q + kv, q + 2 * kv)}
    rows |= {"gate": (0, inter), "up": (inter, 2 * inter)}
    out: dict[str, torch.Tensor] = {}
    needed = hf_shapes(cfg)
    for pattern, (field, part) in HF_TENSOR_MAP.items():
        if pattern == "lm_head.weight" and tied:
            continue
        if "{i}" in pattern and pattern.format(i=0) not in needed:  # not in this family
            continue
        holders: list[tuple[str, object]]
        if "{i}" in pattern:
            holders = [(pattern.format(i=i), w.layers[i]) for i in range(cfg.num_hidden_layers)]
        else:
            holders = [(pattern, w)]
        for name, holder in holders:
            t: torch.Tensor = getattr(holder, field)
            if part is not None:
                start, stop = rows[part]
                t = t[start:stop]
            out[name] = t
    return out


def _copy_all(
    ckpt: Checkpoint,
    sources: dict[str, tuple[Header, TensorEntry]],
    dest: dict[str, torch.Tensor],
) -> None:
    finite = FiniteCheck()
    for header in ckpt.headers:
        entries = sorted((e for h, e in sources.values() if h is header), key=lambda e: e.begin)
        tmap = TensorMap(header)  # each file is read front to back
        try:
            for e in entries:
                _copy_one(tmap.view(e.name), dest[e.name])
                finite.add(e.name, dest[e.name])
                tmap.release(e.name)
        finally:
            tmap.close()
    finite.verify(ckpt)


@torch.no_grad()
def _copy_one(src: torch.Tensor, dst: torch.Tensor) -> None:
    # src: a CPU view of the mapped file; dst: a slice of the destination, same shape.
    if dst.device.type != "cpu" and src.dtype != dst.dtype:
        # Convert on the device: a CPU conversion would allocate the whole tensor in host RAM.
        src = src.to(dst.device)
    dst.copy_(src)
