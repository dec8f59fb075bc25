"""Quantized checkpoints written by an independent writer (published.py, from the publishers'
packing code) load into packed weights that dequantize to exactly what the writer meant.

Tiny Qwen3 shapes: hidden 64, q width 128, kv width 64, intermediate 192, so no dimension is
a multiple of 128 (FP8 blocks are partial, per-row scales appear where q/k/v rows do not
fill blocks), groups of 32 and 64, one group per row, asymmetric zeros, act-order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from published import PARTS, projection, write_awq, write_fp8, write_gptq

from evokernel.model.loader import load_model
from evokernel.model.quant.packed import Fp8Weight, IntWeight
from evokernel.model.random import write_random_checkpoint
from evokernel.model.weights import dense


def _check_all(model_dir: Path, ref: dict[str, torch.Tensor], layers: int = 2) -> None:
    cfg, w = load_model(model_dir, dtype=torch.float32)
    assert cfg.quantization is not None
    for i in range(layers):
        for field in PARTS:
            got = getattr(w.layers[i], field)
            assert isinstance(got, (Fp8Weight, IntWeight)), (field, type(got))
            want = projection(ref, i, field)
            assert torch.equal(got.dequantize(torch.float32), want), (i, field)
    if "lm_head" in ref:
        assert torch.equal(w.lm_head.dequantize(torch.float32), ref["lm_head"])
    else:
        assert w.lm_head is w.embed_tokens or isinstance(w.lm_head, torch.Tensor)


@pytest.fixture(scope="module")
def untied_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_checkpoint(
        tmp_path_factory.mktemp("untied"), preset="tiny", seed=3, untied=True
    )


@pytest.mark.parametrize(
    "bits,group,sym,desc_act",
    [
        (4, 32, True, False),
        (4, 32, False, True),
        (8, -1, False, False),
        (8, 32, True, True),
        (4, 64, True, False),
    ],
)
def test_gptq_loads_as_its_writer_dequantizes(tiny_dir, tmp_path, bits, group, sym, desc_act):
    ref = write_gptq(tiny_dir, tmp_path / "q", bits, group, sym=sym, desc_act=desc_act)
    _check_all(tmp_path / "q", ref)
    _, w = load_model(tmp_path / "q", dtype=torch.float32)
    qkv = w.layers[0].qkv_proj
    assert isinstance(qkv, IntWeight)
    assert (qkv.perm is not None) == desc_act  # act-order kept as a column permutation
    assert (qkv.zeros is None) == sym  # symmetric zero points are not read at all


def test_gptq_with_a_quantized_head(untied_dir, tmp_path):
    ref = write_gptq(untied_dir, tmp_path / "q", 8, 32, head=True)
    _check_all(tmp_path / "q", ref)


def test_awq_gemm_loads_as_its_writer_dequantizes(tiny_dir, tmp_path):
    ref = write_awq(tiny_dir, tmp_path / "q", group_size=32)
    _check_all(tmp_path / "q", ref)


@pytest.mark.parametrize("block", [(128, 128), (32, 64)])
def test_fp8_block_loads_as_its_writer_dequantizes(tiny_dir, tmp_path, block):
    ref = write_fp8(tiny_dir, tmp_path / "q", block)
    _check_all(tmp_path / "q", ref)
    _, w = load_model(tmp_path / "q", dtype=torch.float32)
    qkv = w.layers[0].qkv_proj
    assert isinstance(qkv, Fp8Weight)
    # q (128 rows) and k, v (64 rows each) do not all fill 128-row blocks: per-row scales
    assert qkv.block_n == (1 if block[0] == 128 else 32)


def test_fp8_with_a_quantized_head(untied_dir, tmp_path):
    ref = write_fp8(untied_dir, tmp_path / "q", head=True)
    _check_all(tmp_path / "q", ref)


def test_a_sharded_quantized_checkpoint_loads(tiny_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    ref = write_gptq(tiny_dir, tmp_path / "q", 4, 32)
    src = tmp_path / "q" / "model.safetensors"
    tensors = load_file(src)
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half],
              "model-00002-of-00002.safetensors": names[half:]}  # fmt: skip
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(tmp_path / "q" / shard))
    index = {"weight_map": {k: s for s, keys in shards.items() for k in keys}}
    (tmp_path / "q" / "model.safetensors.index.json").write_text(json.dumps(index))
    src.unlink()
    _check_all(tmp_path / "q", ref)


def test_dense_of_a_packed_projection_is_its_dequantization(tiny_dir, tmp_path):
    write_gptq(tiny_dir, tmp_path / "q", 4, 32)
    _, w = load_model(tmp_path / "q", dtype=torch.float16)
    qkv = w.layers[1].qkv_proj
    assert torch.equal(dense(qkv, torch.float16), qkv.dequantize(torch.float32).half())


def test_model_info_reads_the_values_of_an_fp8_checkpoint(tiny_dir, tmp_path, capsys):
    """The value check reads float8 tensors (the CPU has no float8 sum: they are widened),
    and names the quantization."""
    from evokernel.cli import main

    write_fp8(tiny_dir, tmp_path / "q", (32, 64))
    assert main(["model", "info", str(tmp_path / "q")]) == 0
    out = capsys.readouterr().out
    assert "values      all finite" in out and "quantized   fp8 fp8-b32x64, head dense" in out
