"""The fused decode kernels on packed weights (ops/quant.py) vs float32 torch references.

Odd shapes everywhere (N and K not multiples of 128, K not a multiple of a group or of a
word's values), group sizes 32 / 64 / -1, asymmetric zero points with and without GPTQ v1's
offset, act-order permutations, FP8 blocks of 128x128, 16x32 and per-row scales, 1..9 rows.
Run on the CPU under the Triton interpreter in float32 and float16 (bfloat16 on the GPU).
"""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DTYPES, assert_close
from quant_weights import (
    EPS,
    fp8_weight,
    int_weight,
    ref_gate_up,
    ref_linear,
    ref_linear_residual,
    ref_logits,
    ref_norm_linear,
)

from evokernel.model.quant.packed import Fp8Weight, cdiv
from evokernel.ops import decode, quant
from evokernel.ops.decode import DecodeTuning, argmax_keys
from evokernel.ops.grid import MAX_ROWS
from evokernel.ops.tuning import DEFAULT, check_tuning

# (bits, group, zeros, zero_offset, perm)
INT_CASES = [
    (4, 32, True, 0, False),
    (4, -1, False, 0, False),
    (4, 64, True, 1, True),
    (8, 32, False, 0, True),
    (8, -1, True, 1, False),
]
FP8_BLOCKS = [(128, 128), (16, 32), (1, 128)]
SHAPES = [(1, 200, 96), (3, 77, 200), (9, 130, 72)]  # M, N, K


def _weights(kind, N, K, g, device):
    if kind[0] == "fp8":
        return fp8_weight(N, K, kind[1], g, device)
    bits, group, zeros, offset, perm = kind[1]
    return int_weight(N, K, bits, group, g, zeros=zeros, perm=perm, zero_offset=offset,
                      device=device)  # fmt: skip


KINDS = [("int", c) for c in INT_CASES] + [("fp8", b) for b in FP8_BLOCKS]
IDS = [f"int{c[0]}-g{c[1]}{'-z' if c[2] else ''}{'-v1' if c[3] else ''}{'-perm' if c[4] else ''}"
       for c in INT_CASES] + [f"fp8-{b[0]}x{b[1]}" for b in FP8_BLOCKS]  # fmt: skip


def _randn(*shape, g, dtype, device, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(device, dtype)


# Each weight kind on one of the shapes, in turn (every shape meets several kinds).
CASES = [
    pytest.param(kind, *SHAPES[i % len(SHAPES)], id=f"{name}-{'x'.join(map(str, SHAPES[i % 3]))}")
    for i, (kind, name) in enumerate(zip(KINDS, IDS))
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind,M,N,K", CASES)
def test_fused_ops_match_float32_references(kind, M, N, K, dtype, device) -> None:
    g = torch.Generator().manual_seed(M * 1000 + N + K)
    w = _weights(kind, N, K, g, device)
    x = _randn(M, K, g=g, dtype=dtype, device=device, scale=3.0)
    norm_w = (1 + 0.2 * torch.randn(K, generator=g)).to(device, dtype)
    bias = _randn(N, g=g, dtype=dtype, device=device)
    got = quant.norm_linear(x, norm_w, w, EPS)
    assert_close(got, ref_norm_linear(x, norm_w, w), "norm_linear")
    got = quant.norm_linear(x, norm_w, w, EPS, bias)
    assert_close(got, ref_norm_linear(x, norm_w, w, bias=bias), "norm_linear + bias")
    logits = quant.norm_logits(x, norm_w, w, EPS)
    assert logits.dtype == torch.float32
    # Logits are the model dtype's values widened: compare them at that precision.
    assert_close(logits.to(dtype), ref_logits(x, norm_w, w).to(dtype), "logits")
    x_n = _randn(M, K, g=g, dtype=dtype, device=device)
    res = _randn(M, N, g=g, dtype=dtype, device=device, scale=4.0)
    want = ref_linear_residual(x_n, w, res.clone())
    out = res.clone()
    assert quant.linear_residual(x_n, w, out) is out  # in place
    assert_close(out, want, "residual")
    assert_close(quant.linear(x_n, w), ref_linear(x_n, w), "linear")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS, ids=IDS)
def test_gate_up_silu_matches_its_reference(kind, dtype, device) -> None:
    M, inter, K = 3, 45, 136
    g = torch.Generator().manual_seed(11)
    w = _weights(kind, 2 * inter, K, g, device)
    x = _randn(M, K, g=g, dtype=dtype, device=device, scale=2.0)
    norm_w = (1 + 0.2 * torch.randn(K, generator=g)).to(device, dtype)
    got = quant.norm_gate_up_silu(x, norm_w, w, EPS)
    assert_close(got, ref_gate_up(x, norm_w, w), "act")


SMALL_TILES = [pytest.param(k, 1024, id=f"{i}-small-tiles") for k, i in zip(KINDS, IDS)][::4]


@pytest.mark.parametrize(
    "kind,tile_bytes", [pytest.param(k, 32 * 1024, id=i) for k, i in zip(KINDS, IDS)] + SMALL_TILES
)
def test_greedy_head_writes_the_argmax_and_advances(kind, tile_bytes, device) -> None:
    M, V, K = 3, 301, 96
    g = torch.Generator().manual_seed(5)
    w = _weights(kind, V, K, g, device)
    x = _randn(M, K, g=g, dtype=torch.float32, device=device, scale=2.0)
    norm_w = (1 + 0.2 * torch.randn(K, generator=g)).to(device)
    pos = torch.arange(3, 3 + M, dtype=torch.int32, device=device)
    tokens, lens = torch.full((M,), -1, dtype=torch.int64, device=device), pos + 1
    tuning = DecodeTuning(tile_bytes=tile_bytes)
    decode.greedy_head(x, norm_w, w, EPS, tokens, pos, lens, tuning=tuning)
    assert tokens.tolist() == ref_logits(x, norm_w, w).argmax(-1).tolist()
    assert pos.tolist() == [4, 5, 6] and lens.tolist() == [5, 6, 7]
    assert not argmax_keys(torch.device(device), MAX_ROWS).any()  # left zero


def test_many_rows_run_in_one_launch_and_prefill_goes_to_torch(device) -> None:
    keys = torch.zeros(MAX_ROWS, dtype=torch.int64, device=device)
    g0 = torch.Generator().manual_seed(3)
    head = int_weight(50, 64, 8, 32, g0, device=device)
    x0 = _randn(20, 64, g=g0, dtype=torch.float32, device=device)
    quant.head_keys(x0, torch.ones(64, device=device), head, EPS, keys)
    assert keys[:20].gt(0).all() and not keys[20:].any()  # one key per row, from zero
    g = torch.Generator().manual_seed(2)
    w = int_weight(40, 64, 4, 32, g, device=device)
    for M in (40, quant.LINEAR_KERNEL_ROWS + 1):  # a batch; a prefill
        x = _randn(M, 64, g=g, dtype=torch.float32, device=device)
        norm_w = torch.ones(64, device=device)
        assert_close(quant.norm_linear(x, norm_w, w, EPS), ref_norm_linear(x, norm_w, w), "y")
        assert_close(quant.linear(x, w), ref_linear(x, w), "linear")


def test_block_n_keeps_a_wave_of_programs_and_the_tile_budget(device) -> None:
    g = torch.Generator().manual_seed(0)
    w = int_weight(4096, 1024, 4, 128, g, zeros=False)
    lay = quant.layout(w)
    assert lay.row_bytes == 8 * 16 * 4 + 8 * 2  # words + float16 scales, no zero points
    tuning = DecodeTuning(tile_bytes=32 * 1024)
    bn = quant.block_n(4096, lay, torch.device("cpu"), tuning)
    assert bn * lay.row_bytes <= 32 * 1024 and bn & (bn - 1) == 0


def _every_byte_fp8(N: int, K: int, device: str) -> Fp8Weight:
    """Every e4m3 bit pattern but the two NaNs (subnormals, both zeros, the largest values),
    cycled over an [N, K] weight with per-row scales."""
    codes = torch.tensor([b for b in range(256) if b & 0x7F != 0x7F], dtype=torch.uint8)
    flat = codes.repeat(-(-N * K // codes.numel()))[: N * K]
    weight = flat.view(torch.float8_e4m3fn).reshape(N, K)
    scale = torch.linspace(0.5, 2.0, N).reshape(N, 1).expand(N, cdiv(K, 128)).contiguous()
    return Fp8Weight(weight, scale, 1, 128).to(device)


@pytest.mark.parametrize("kind", ["fp8-every-byte", *IDS])
def test_every_dequantisation_gives_the_same_products(kind, device, monkeypatch) -> None:
    """kernels/quant_gemv.py DEQ: values placed in float32 bit fields, or cast before the
    PDL wait with the scales applied, against Triton's casts after it: the same float32
    values, so the same outputs to summation order."""
    M, N, K = 2, 70, 264
    g = torch.Generator().manual_seed(17)
    if kind == "fp8-every-byte":
        w = _every_byte_fp8(N, K, device)
    else:
        w = _weights(KINDS[IDS.index(kind)], N, K, g, device)
    x = _randn(M, K, g=g, dtype=torch.float32, device=device, scale=2.0)
    norm_w = (1 + 0.2 * torch.randn(K, generator=g)).to(device)
    out = {}
    for mode in quant.DEQ_CODES:
        monkeypatch.setattr(quant, "DEQUANT", mode)
        out[mode] = quant.norm_linear(x, norm_w, w, EPS)
    assert_close(out["magic"], out["convert"], "magic vs convert")  # one summation order
    if kind != "fp8-every-byte":  # (its 448s and subnormals in one sum: order-sensitive)
        want = ref_norm_linear(x, norm_w, w)
        for mode, got in out.items():
            assert_close(got, want, f"{mode} vs reference")


def test_the_choice_follows_the_format_the_op_and_k(monkeypatch) -> None:
    g = torch.Generator().manual_seed(1)
    small, large = int_weight(64, 1024, 4, 128, g), int_weight(64, 4096, 4, 128, g)
    deep = int_weight(64, 12288, 4, 128, g)
    rules = quant.CHOICES[("int4", "norm_linear")]
    assert quant.choice(small, "norm_linear") == (*rules[0][1:], 0)
    # "cuda" choices run the first Triton rule that covers the K where the kernel does not
    assert quant.fallback(small, "norm_linear") == next(r[1:] for r in rules if r[1] != "cuda")
    assert quant.fallback(large, "norm_linear") == rules[-1][1:]
    assert quant.layout(large, "norm_linear").warps == rules[-1][2]
    residual = quant.CHOICES[("int4", "linear_residual")]
    assert quant.choice(small, "linear_residual") == (*residual[0][1:], 0)
    assert quant.choice(large, "linear_residual") == (*residual[1][1:], 0)
    assert quant.choice(deep, "linear_residual") == (*residual[2][1:], 0)
    assert residual[1][1:] == ("cuda", 8) and residual[2][1:] == ("cuda", 16)
    assert quant.layout(large, "head").warps == quant.CHOICES[("int4", "head")][-1][2]
    middle = int_weight(64, 2048, 4, 128, g)  # no strided 4-bit passes past K 1,024
    assert quant.fallback(middle, "norm_linear")[0] == "interleave"
    monkeypatch.setattr(quant, "DEQUANT", "convert")  # forces the mode, keeps the warps
    assert quant.choice(small, "linear_residual") == ("convert", residual[0][2], 0)
    with pytest.raises(AssertionError):
        quant.choice(small, "attention")


def test_a_tuning_entry_overrides_the_table_for_its_format_op_and_k() -> None:
    g = torch.Generator().manual_seed(1)
    small, large = int_weight(64, 1024, 4, 128, g), int_weight(64, 4096, 4, 128, g)
    tuned = check_tuning(DEFAULT._replace(quant=(("int4", "norm_linear", 1024, "early", 2, 8192),)))
    assert quant.choice(small, "norm_linear", tuned) == ("early", 2, 8192)
    assert quant.choice(small, "gate_up", tuned) == quant.choice(small, "gate_up")  # other op
    assert quant.choice(large, "norm_linear", tuned) == quant.choice(large, "norm_linear")
    lay = quant.layout(small, "norm_linear", tuned)
    assert (lay.meta["DEQ"], lay.warps, lay.tile_bytes) == (quant.DEQ_CODES["early"], 2, 8192)
    # 8 KB of float32 values ("early": 4 bytes a value, 1,024 a row): 2 rows a program
    assert quant.block_n(64, lay, torch.device("cpu"), tuned) <= 2
    for bad in (
        ("int3", "norm_linear", 1024, "early", 0, 0),
        ("int4", "qkv", 1024, "early", 0, 0),
        ("int4", "norm_linear", 1024, "fast", 0, 0),
        ("int4", "head", 0, "early", 0, 0),
        ("int4", "head", 64, "early", 3, 0),
        ("int4", "head", 64, "early", 0, 3000),
    ):
        with pytest.raises(AssertionError):
            check_tuning(DEFAULT._replace(quant=(bad,)))


def test_the_declared_modes_leave_out_the_known_bad_region() -> None:
    g = torch.Generator().manual_seed(1)
    assert quant.modes(int_weight(64, 1024, 4, 128, g), "norm_linear") == (
        "interleave", "convert", "magic", "early", "cuda")  # fmt: skip
    assert quant.modes(int_weight(64, 2048, 4, 128, g), "gate_up") == ("interleave", "cuda")
    assert "interleave" not in quant.modes(int_weight(64, 2048, 8, 128, g), "head")


@pytest.mark.parametrize("bits", [4, 8])
def test_act_order_from_gather_k_gathers_in_the_launcher(bits, device) -> None:
    """From GATHER_K columns an act-order weight's activations (and norm weight) are gathered
    into stored order by the launcher, and the kernel reads them contiguously."""
    K = quant.GATHER_K + 256
    g = torch.Generator().manual_seed(bits)
    w = int_weight(48, K, bits, 128, g, zeros=True, perm=True, device=device)
    lay = quant.layout(w, "linear_residual")
    assert lay.gather is not None and not lay.meta["HAS_PERM"]
    x = _randn(2, K, g=g, dtype=torch.float32, device=device, scale=2.0)
    norm_w = (1 + 0.2 * torch.randn(K, generator=g)).to(device)
    assert_close(quant.norm_linear(x, norm_w, w, EPS), ref_norm_linear(x, norm_w, w), "qkv")
    res = _randn(2, 48, g=g, dtype=torch.float32, device=device)
    want = ref_linear_residual(x, w, res.clone())
    assert_close(quant.linear_residual(x, w, res), want, "residual")
    assert_close(quant.norm_gate_up_silu(x, norm_w, w, EPS), ref_gate_up(x, norm_w, w), "act")
    assert_close(quant.norm_logits(x, norm_w, w, EPS), ref_logits(x, norm_w, w), "logits")
