"""The loader against transformers on every checkpoint variant it must accept."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_helpers import assert_matches_hf, edit_tensors, hf_model, hf_view
from safetensors.torch import load_file

from evokernel.errors import ConfigError
from evokernel.model.config import ModelConfig
from evokernel.model.loader import load_model, load_weights, resolve_dtype
from evokernel.model.random import write_random_checkpoint

VARIANTS = {
    "tied-bf16": {},
    "untied": {"untied": True},
    "sharded-3": {"shards": 3},
    "sharded-untied": {"shards": 4, "untied": True},
    "gqa-40-8": {"heads": 40, "kv_heads": 8, "head_dim": 16},
    "head-dim-64": {"head_dim": 64},
    "mha-8-8": {"heads": 8, "kv_heads": 8, "head_dim": 16},
    "legacy-config": {"layout": "legacy"},
    "fp16-on-disk": {"dtype": "float16"},
    "fp32-on-disk": {"dtype": "float32", "layout": "legacy"},
    "three-layers": {"layers": 3},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_loads_what_transformers_loads(variant: str, tmp_path: Path) -> None:
    opts = dict(VARIANTS[variant])
    disk_dtype = opts.pop("dtype", "bfloat16")
    path = write_random_checkpoint(tmp_path, "tiny", seed=3, dtype=disk_dtype, **opts)
    cfg, w = load_model(path, "cpu", torch.float32)

    model, info = hf_model(path)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info["mismatched_keys"], info
    assert_matches_hf(model, w, cfg)
    assert cfg.dtype == disk_dtype
    assert model.config.head_dim == cfg.head_dim
    assert model.config.num_key_value_heads == cfg.num_key_value_heads
    assert model.config.rope_parameters["rope_theta"] == cfg.rope_theta == 1e6
    tied = not opts.get("untied", False)
    assert (w.lm_head is w.embed_tokens) == tied
    assert (model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()) == tied


@pytest.mark.parametrize("tied", [True, False])
def test_loads_what_transformers_saves(tied: bool, tmp_path: Path) -> None:
    from transformers import Qwen3Config as HFConfig
    from transformers import Qwen3ForCausalLM

    hf_cfg = HFConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(hf_cfg).to(torch.float16)
    model.save_pretrained(tmp_path, max_shard_size="40KB")  # several shards + index
    assert (tmp_path / "model.safetensors.index.json").is_file()
    cfg, w = load_model(tmp_path, "cpu", torch.float16)
    assert (cfg.gqa_ratio, cfg.dtype, cfg.rope_theta) == (3, "float16", 10000.0)
    assert (w.lm_head is w.embed_tokens) == tied
    assert_matches_hf(model, w, cfg)


def test_packed_rows_hold_q_k_v_and_gate_up_in_order(tiny_dir: Path) -> None:
    cfg, w = load_model(tiny_dir, "cpu", torch.float32)
    raw = load_file(tiny_dir / "model.safetensors")
    q, kv, inter = cfg.q_size, cfg.kv_size, cfg.intermediate_size
    layer = w.layers[1]
    assert layer.qkv_proj.shape == (q + 2 * kv, cfg.hidden_size)
    assert layer.gate_up_proj.shape == (2 * inter, cfg.hidden_size)
    pre = "model.layers.1."
    assert torch.equal(layer.qkv_proj[:q], raw[pre + "self_attn.q_proj.weight"].float())
    assert torch.equal(layer.qkv_proj[q : q + kv], raw[pre + "self_attn.k_proj.weight"].float())
    assert torch.equal(layer.qkv_proj[q + kv :], raw[pre + "self_attn.v_proj.weight"].float())
    assert torch.equal(layer.gate_up_proj[:inter], raw[pre + "mlp.gate_proj.weight"].float())
    assert torch.equal(layer.gate_up_proj[inter:], raw[pre + "mlp.up_proj.weight"].float())
    # Packed tensors are one contiguous allocation each (the engine's linear reads them whole).
    assert layer.qkv_proj.is_contiguous() and layer.gate_up_proj.is_contiguous()


@pytest.mark.parametrize("disk", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("want", ["bfloat16", "float16", "float32"])
def test_converts_every_disk_dtype_to_every_load_dtype(
    disk: str, want: str, tmp_path: Path
) -> None:
    path = write_random_checkpoint(tmp_path, "tiny", seed=5, dtype=disk, layers=1)
    cfg = ModelConfig.from_dir(path)
    w = load_weights(path, cfg, device="cpu", dtype=want)
    raw = load_file(path / "model.safetensors")
    target = resolve_dtype(want)
    assert w.dtype == target
    for name, ref in raw.items():
        assert torch.equal(hf_view(w, cfg, name), ref.to(target)), name
    assert w.nbytes() == sum(t.numel() for t in raw.values()) * w.embed_tokens.element_size()


def test_mixed_dtypes_in_one_file(tiny_copy: Path) -> None:
    raw = load_file(tiny_copy / "model.safetensors")
    norm = raw["model.norm.weight"].float()
    edit_tensors(tiny_copy / "model.safetensors", model__norm__weight=norm)
    _, w = load_model(tiny_copy, "cpu", torch.bfloat16)
    assert torch.equal(w.final_norm, norm.bfloat16())


def test_tied_config_with_equal_stored_head_is_tied(tiny_copy: Path) -> None:
    raw = load_file(tiny_copy / "model.safetensors")
    edit_tensors(tiny_copy / "model.safetensors", lm_head__weight=raw["model.embed_tokens.weight"])
    _, w = load_model(tiny_copy, "cpu", torch.float32)
    assert w.lm_head is w.embed_tokens


def test_tied_config_with_different_stored_head_follows_transformers(tiny_copy: Path) -> None:
    raw = load_file(tiny_copy / "model.safetensors")
    head = torch.randn_like(raw["model.embed_tokens.weight"], dtype=torch.float32).bfloat16()
    edit_tensors(tiny_copy / "model.safetensors", lm_head__weight=head)
    cfg, w = load_model(tiny_copy, "cpu", torch.float32)
    assert cfg.tie_word_embeddings
    assert w.lm_head is not w.embed_tokens
    assert torch.equal(w.lm_head, head.float())
    model, _ = hf_model(tiny_copy)
    assert torch.equal(model.lm_head.weight, w.lm_head)
    assert torch.equal(model.model.embed_tokens.weight, w.embed_tokens)


def test_rotary_inv_freq_buffers_are_ignored(tiny_copy: Path) -> None:
    buf = torch.ones(16)
    edit_tensors(
        tiny_copy / "model.safetensors", model__layers__0__self_attn__rotary_emb__inv_freq=buf
    )
    cfg, w = load_model(tiny_copy, "cpu", torch.float32)
    assert len(w.layers) == cfg.num_hidden_layers


def test_eos_ids_merge_config_and_generation_config(tiny_dir: Path) -> None:
    cfg, _ = load_model(tiny_dir, "cpu", torch.float32)
    # config.json: <|im_end|> (258); generation_config.json adds <|endoftext|> (256).
    assert cfg.eos_token_ids == (258, 256)
    assert cfg.bos_token_id == 256


def test_unsupported_load_dtype_is_a_config_error(tiny_dir: Path) -> None:
    with pytest.raises(ConfigError, match="unsupported weight dtype 'int8'"):
        load_model(tiny_dir, "cpu", "int8")


@pytest.mark.gpu
def test_loads_onto_cuda_like_on_cpu(mid_dir: Path) -> None:
    cfg, gpu = load_model(mid_dir, "cuda", torch.bfloat16)
    _, cpu = load_model(mid_dir, "cpu", torch.bfloat16)
    assert gpu.device.type == "cuda" and gpu.lm_head is gpu.embed_tokens
    assert torch.equal(gpu.embed_tokens.cpu(), cpu.embed_tokens)
    assert torch.equal(gpu.layers[-1].qkv_proj.cpu(), cpu.layers[-1].qkv_proj)
    _, gpu32 = load_model(mid_dir, "cuda", torch.float32)  # converted on the device
    assert torch.equal(gpu32.layers[0].gate_up_proj.cpu(), cpu.layers[0].gate_up_proj.float())
    assert cfg.num_hidden_layers == len(gpu.layers)
