"""Quantized checkpoints that must not run are refused in one line naming the field, value
or tensor: through the API (`CheckpointError`) and through the CLI (`evokernel model info`:
exit 2, one `error:` line)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from published import write_fp8, write_gptq
from safetensors.torch import load_file, save_file

from evokernel.cli import main
from evokernel.errors import CheckpointError
from evokernel.model.config import ModelConfig
from evokernel.model.loader import load_model
from evokernel.model.quant.config import parse_quantization

Q = "model.layers.1.self_attn.q_proj"
K = "model.layers.1.self_attn.k_proj"


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize(
    "config,words",
    [
        ({"quant_method": "bitsandbytes"}, ["quant_method", '"bitsandbytes"']),
        ({"quant_method": "compressed-tensors"}, ["config_groups", "non-empty"]),
        ({"quant_method": "torchao"}, ["quant_method", '"torchao"', "compressed-tensors"]),
        ({"quant_method": "gptq", "bits": 3}, ["bits", "3", "(4, 8)"]),
        ({"quant_method": "gptq", "bits": 4, "group_size": 100}, ["group_size", "100"]),
        (
            {"quant_method": "gptq", "bits": 4, "checkpoint_format": "marlin"},
            ["checkpoint_format", '"marlin"'],
        ),
        ({"quant_method": "gptq", "bits": 4, "sym": "yes"}, ["sym", '"yes"']),
        (
            {"quant_method": "gptq", "bits": 4, "dynamic": {"+:lm_head": {"bits": 2}}},
            ["dynamic", "bits", "2"],
        ),
        ({"quant_method": "awq", "bits": 4, "version": "gemv"}, ["version", '"gemv"']),
        ({"quant_method": "awq", "bits": 4, "zero_point": False}, ["zero_point", "false"]),
        ({"quant_method": "awq", "bits": 8}, ["bits", "8"]),
        (
            {"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]},
            ["fmt", '"e5m2"'],
        ),
        (
            {"quant_method": "fp8", "activation_scheme": "token", "weight_block_size": [128, 128]},
            ["activation_scheme", '"token"'],
        ),
        ({"quant_method": "fp8", "kv_cache_scheme": "static"}, ["kv_cache_scheme", '"static"']),
        ({"quant_method": "fp8", "ignored_layers": "lm_head"}, ["ignored_layers", '"lm_head"']),
        ({"quant_method": "fp8", "weight_block_size": [128, 100]}, ["weight_block_size"]),
    ],
)
def test_unsupported_variants_are_named(config: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(CheckpointError) as info:
        parse_quantization(config, "config.json")
    text = _one_line(info.value)
    assert text.startswith("config.json: quantization_config")
    for word in words:
        assert word in text, (word, text)


def test_dynamic_rules_pick_each_module(tiny_dir: Path) -> None:
    raw = json.loads((tiny_dir / "config.json").read_text())
    raw["quantization_config"] = {
        "quant_method": "gptq", "bits": 4, "group_size": 32, "lm_head": True,
        "dynamic": {"-:.*down_proj": {}, r"+:.*layers\.1\..*": {"bits": 8}, "lm_head": {"bits": 8}},
    }  # fmt: skip
    q = ModelConfig.from_hf_dict(raw).quantization
    assert q is not None
    assert q.spec("model.layers.0.mlp.down_proj") is None
    assert q.spec("model.layers.1.self_attn.q_proj").bits == 8  # type: ignore[union-attr]
    assert q.spec("model.layers.0.self_attn.q_proj").bits == 4  # type: ignore[union-attr]
    assert q.spec("lm_head").bits == 8  # type: ignore[union-attr]
    # written back unchanged
    assert (
        ModelConfig.from_hf_dict(raw).to_hf_dict()["quantization_config"]
        == raw["quantization_config"]
    )


def _edit(path: Path, fn: Callable[[dict[str, torch.Tensor]], None]) -> None:
    tensors = load_file(path)
    fn(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def _edit_config(d: Path, **changes: Any) -> None:
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"] |= changes
    (d / "config.json").write_text(json.dumps(cfg))


def _nan_scale(t: dict[str, torch.Tensor]) -> None:
    t[f"{Q}.scales"][0, 3] = float("nan")


def _wrong_packed_shape(t: dict[str, torch.Tensor]) -> None:
    t[f"{Q}.qweight"] = t[f"{Q}.qweight"][:-1].contiguous()


def _missing_zeros(t: dict[str, torch.Tensor]) -> None:
    del t[f"{Q}.qzeros"]


def _float_qweight(t: dict[str, torch.Tensor]) -> None:
    t[f"{Q}.qweight"] = t[f"{Q}.qweight"].float()


def _g_idx_out_of_range(t: dict[str, torch.Tensor]) -> None:
    t[f"{Q}.g_idx"][5] = 9


def _g_idx_uneven(t: dict[str, torch.Tensor]) -> None:
    t[f"{Q}.g_idx"][:] = 0
    t[f"{Q}.g_idx"][0] = 1


def _act_orders_differ(t: dict[str, torch.Tensor]) -> None:
    g = t[f"{K}.g_idx"]
    t[f"{K}.g_idx"] = torch.cat([g[32:], g[:32]])  # another valid grouping, not q's


GPTQ_DEFECTS = [
    (_nan_scale, [f"'{Q}.scales'", "NaN or Inf"]),
    (_wrong_packed_shape, [f"'{Q}.qweight'", "has shape [7, 128]", "implies [8, 128]"]),
    (_missing_zeros, ["missing tensor", f"'{Q}.qzeros'"]),
    (_float_qweight, [f"'{Q}.qweight'", "dtype F32", "supported: I32"]),
    (_g_idx_out_of_range, [f"'{Q}.g_idx'", "outside [0, 2)"]),
    (_g_idx_uneven, [f"'{Q}.g_idx'", "full groups of 32"]),
    (_act_orders_differ, [f"{K}.g_idx", "act-order"]),
]
HEADER_DEFECTS = (_nan_scale, _wrong_packed_shape, _missing_zeros, _float_qweight)


@pytest.mark.parametrize("defect,words", GPTQ_DEFECTS, ids=lambda v: getattr(v, "__name__", ""))
def test_broken_gptq_tensors_are_refused(tiny_dir, tmp_path, capsys, defect, words) -> None:
    d = tmp_path / "q"
    write_gptq(tiny_dir, d, 4, 32, desc_act=True)
    _edit(d / "model.safetensors", defect)
    with pytest.raises(CheckpointError) as info:
        load_model(d)
    text = _one_line(info.value)
    for word in words:
        assert word in text, (word, text)
    if defect in HEADER_DEFECTS:  # `model info` checks headers and values, not g_idx
        assert main(["model", "info", str(d)]) == 2
        _out, err = capsys.readouterr()
        assert err.startswith("error: ") and err.count("\n") == 1, err


def test_fp8_nan_encodings_and_corrupt_scales_are_refused(tiny_dir, tmp_path) -> None:
    d = tmp_path / "q"
    write_fp8(tiny_dir, d)

    def nan_weight(t: dict[str, torch.Tensor]) -> None:
        t[f"{Q}.weight"].view(torch.uint8)[3, 4] = 0x7F

    _edit(d / "model.safetensors", nan_weight)
    with pytest.raises(CheckpointError, match=rf"'{Q}.weight' holds NaN"):
        load_model(d)
    write_fp8(tiny_dir, tmp_path / "q2")

    def inf_scale(t: dict[str, torch.Tensor]) -> None:
        t[f"{Q}.weight_scale_inv"][0, 0] = float("inf")

    _edit(tmp_path / "q2" / "model.safetensors", inf_scale)
    with pytest.raises(CheckpointError, match=rf"'{Q}.weight_scale_inv' holds NaN or Inf"):
        load_model(tmp_path / "q2")


def test_scales_of_the_wrong_grid_are_refused(tiny_dir, tmp_path) -> None:
    d = tmp_path / "q"
    write_fp8(tiny_dir, d)  # scales for 128x128 blocks
    _edit_config(d, weight_block_size=[64, 64])
    with pytest.raises(CheckpointError, match=r"weight_scale_inv' has shape \[1, 1\], "):
        load_model(d)


def test_parts_of_one_projection_in_different_formats_are_refused(tiny_dir, tmp_path) -> None:
    d = tmp_path / "q"
    write_gptq(tiny_dir, d, 4, 32)
    _edit_config(d, dynamic={"+:.*k_proj": {"bits": 8}})
    with pytest.raises(CheckpointError) as info:
        load_model(d)
    text = _one_line(info.value)
    assert "k_proj is stored as gptq int8-g32" in text and "qkv_proj" in text


def test_shapes_a_layout_cannot_hold_are_refused(tmp_path) -> None:
    from evokernel.model.random import write_random_checkpoint

    src = write_random_checkpoint(tmp_path / "src", preset="tiny", hidden=60)
    d = tmp_path / "q"
    d.mkdir()
    raw = json.loads((src / "config.json").read_text())
    raw["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 32}
    (d / "config.json").write_text(json.dumps(raw))
    (d / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError, match=r"in_features and out_features must be multiples"):
        load_model(d)


def test_the_fp8_head_is_dense_unless_the_config_lists_what_stays_dense() -> None:
    # transformers keeps the output embedding dense by default, converts it when the config
    # lists the modules to keep instead (an empty list: everything is converted)
    block = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    assert parse_quantization(block, "c").spec("lm_head") is None
    assert parse_quantization(block | {"modules_to_not_convert": []}, "c").spec("lm_head")
    listed = parse_quantization(block | {"modules_to_not_convert": ["lm_head"]}, "c")
    assert listed.spec("lm_head") is None
    assert listed.spec("model.layers.0.mlp.up_proj") is not None
