"""The fused decode-step kernels (ops/decode.py) vs their torch compositions (ops/compose.py).

Odd sizes everywhere (rows, columns and K that are not multiples of any block), 1..40 rows
(one-row CUDA-core kernels below `rows_min`, the tensor-core rows kernel from there on, both
forced at the same sizes), q/k/v biases, NaN junk in the cache past seq_lens, forced attention
splits including ones with empty chunks, and GQA ratios from 1:1 to 5:1.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from kernel_checks import DTYPES, assert_close

from evokernel.kernels.gemv import argmax_key
from evokernel.ops import decode, layer, rope
from evokernel.ops.registry import OpSet
from evokernel.ops.tuning import check_tuning

REF = OpSet.torch()
EPS = 1e-6
GEMV_CASES = [(1, 96, 64), (3, 200, 96), (8, 33, 130), (2, 1000, 48), (17, 70, 40)]  # M, N, K
# One-row kernels at every row count; the rows kernel from 2 rows on as the engine launches
# it (the weights the MMA's row operand, every norm a launch of its own, the whole K or K split
# to fill the SMs, row tiles looped over), also with K split in 64-wide slices over up to three
# programs per column tile (merged by the last to finish); and the rows kernel's fused design
# (the norm in every program, x the MMA's row operand), also split; and the whole-K design (each
# program the whole K, cut into parts of the batched dot), with its own norm and with the
# norm launched apart, in parts narrower than K's padding and row tiles looped over; and the
# streaming design (K in pipelined chunks), with its own norm and K split into ragged ranges
# over up to three programs per column tile, and with the norm launched apart; and the deep
# ops (K >= 2N) in their own columns and chunks. Every path but the default keeps the
# residual ops off the CUDA rows kernel (tests/kernels/test_rows_cuda.py tests that).
GEMV_PATHS = {
    "default": decode.DEFAULT,
    "one-row": decode.DecodeTuning(rows_min=1 << 30, cuda_rows_min=0),
    "rows": decode.DecodeTuning(rows_min=2, cuda_rows_min=0),
    "rows-split": decode.DecodeTuning(
        cuda_rows_min=0,
        rows_min=2,
        rows_block_k=64,
        rows_tile_bytes=16,
        rows_whole_k=0,
        rows_stream=False,
    ),
    "rows-fused-split": decode.DecodeTuning(
        cuda_rows_min=0,
        rows_min=2,
        rows_whole_k=0,
        rows_stream=False,
        rows_block_n=16,
        rows_block_k=64,
        rows_tile_bytes=16,
        rows_swap=False,
        rows_prenorm=0,
        rows_warps=4,
    ),
    "rows-stream": decode.DecodeTuning(
        cuda_rows_min=0,
        rows_min=2,
        rows_whole_k=0,
        rows_prenorm=0,
        stream_block_n=16,
        stream_block_k=32,
        stream_stages=2,
        stream_programs=1 << 10,
    ),
    "rows-stream-prenorm": decode.DecodeTuning(
        cuda_rows_min=0, rows_min=2, rows_whole_k=0, stream_block_n=32, stream_block_k=64
    ),
    "rows-stream-deep": decode.DecodeTuning(
        cuda_rows_min=0,
        rows_min=2,
        rows_whole_k=0,
        stream_block_n=64,
        stream_deep_rows=2,
        stream_deep_n=16,
        stream_deep_k=64,
        stream_deep_programs=1 << 10,
    ),
    "whole-k": decode.DecodeTuning(cuda_rows_min=0, rows_min=2, rows_whole_k=256, rows_prenorm=0),
    "whole-k-parts": decode.DecodeTuning(
        cuda_rows_min=0,
        rows_min=2,
        rows_whole_k=256,
        rows_whole_k_rows=64,
        rows_part_k=16,
        rows_block_m=16,
        rows_whole_k_n=32,
    ),
}


def _randn(*shape, g, dtype, device, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(device, dtype)


@pytest.mark.parametrize("path", list(GEMV_PATHS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,N,K", GEMV_CASES)
def test_gemv_ops_match_their_compositions(M, N, K, dtype, path, device) -> None:
    if path != "default" and M == 1:
        pytest.skip("one row: the one-row kernel whatever the path")
    t = GEMV_PATHS[path]
    g = torch.Generator().manual_seed(M * 1000 + N + K)
    x = _randn(M, K, g=g, dtype=dtype, device=device, scale=3.0)
    norm_w = (1 + 0.2 * torch.randn(K, generator=g)).to(device, dtype)
    w = _randn(N, K, g=g, dtype=dtype, device=device, scale=K**-0.5)
    bias = _randn(N, g=g, dtype=dtype, device=device, scale=0.3)
    gate_up = _randn(2 * N, K, g=g, dtype=dtype, device=device, scale=K**-0.5)
    got = decode.norm_linear(x, norm_w, w, EPS, tuning=t)
    assert_close(got, REF.norm_linear(x, norm_w, w, EPS), "y")
    got = decode.norm_linear(x, norm_w, w, EPS, bias, tuning=t)
    assert_close(got, REF.norm_linear(x, norm_w, w, EPS, bias), "y + bias")
    assert_close(
        decode.norm_gate_up_silu(x, norm_w, gate_up, EPS, tuning=t),
        REF.norm_gate_up_silu(x, norm_w, gate_up, EPS),
        "act",
    )
    assert_close(
        decode.norm_logits(x, norm_w, w, EPS, tuning=t), REF.norm_logits(x, norm_w, w, EPS),
        "logits", rounded=dtype,
    )  # fmt: skip
    x_n = _randn(M, K, g=g, dtype=dtype, device=device)
    res = _randn(M, N, g=g, dtype=dtype, device=device, scale=4.0)
    want = REF.linear_residual(x_n, w, res.clone())
    got = res.clone()
    assert decode.linear_residual(x_n, w, got, tuning=t) is got  # in place
    assert_close(got, want, "residual")
    if path.startswith("rows"):  # the split's tickets are left zero for the next launch
        assert not layer.kept_zeros("rows_tickets", torch.device(device), 1, torch.int32).any()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,N,K", GEMV_CASES)
def test_greedy_head_writes_argmax_and_advances(M, N, K, dtype, device) -> None:
    g = torch.Generator().manual_seed(7 + M + N)
    x = _randn(M, K, g=g, dtype=dtype, device=device, scale=2.0)
    norm_w = (1 + 0.2 * torch.randn(K, generator=g)).to(device, dtype)
    lm_head = _randn(N, K, g=g, dtype=dtype, device=device, scale=K**-0.5)
    pos = torch.arange(3, 3 + M, dtype=torch.int32, device=device)
    tokens, lens = torch.full((M,), -1, dtype=torch.int64, device=device), pos + 1
    decode.greedy_head(x, norm_w, lm_head, EPS, tokens, pos, lens)
    want = REF.norm_logits(x, norm_w, lm_head, EPS).argmax(dim=-1)
    assert tokens.tolist() == want.tolist()
    assert pos.tolist() == list(range(4, 4 + M)) and lens.tolist() == list(range(5, 5 + M))


@pytest.mark.parametrize("tile_bytes", [32 * 1024, 256])
def test_greedy_head_ties_go_to_the_lowest_id(tile_bytes: int, device: str) -> None:
    # Rows 70 and 900 of lm_head are equal and give the largest logit: 70 must win, across
    # programs (256-byte tiles: a program per row).
    g = torch.Generator().manual_seed(1)
    V, K = 1000, 64
    x = torch.randn(2, K, generator=g).to(device)
    lm_head = (torch.randn(V, K, generator=g) * 0.01).to(device)
    lm_head[900] = lm_head[70] = x[0] / x[0].norm() * 3
    norm_w = torch.ones(K, device=device)
    tokens = torch.zeros(2, dtype=torch.int64, device=device)
    pos = torch.zeros(2, dtype=torch.int32, device=device)
    tuning = decode.DecodeTuning(tile_bytes=tile_bytes)
    decode.greedy_head(x, norm_w, lm_head, EPS, tokens, pos, pos + 1, tuning=tuning)
    assert int(tokens[0]) == 70
    keys = decode.argmax_keys(torch.device(device), decode.MAX_ROWS)
    assert not keys.any()  # left zero for the next head


@triton.jit
def _argmax_keys_kernel(value_ptr, index_ptr, key_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    key = argmax_key(tl.load(value_ptr + offs), tl.load(index_ptr + offs))
    tl.store(key_ptr + offs, key)


def test_argmax_keys_order_values_then_lower_ids(device: str) -> None:
    # What greedy_head's atomic max compares: the value, then the lower id; -0 equals +0.
    inf = float("inf")
    values = [-inf, -3.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, inf, 2.0, 2.0]
    index = [7, 7, 7, 7, 7, 7, 7, 7, 3, 0]
    pad = 16 - len(values)
    out = torch.zeros(16, dtype=torch.int64, device=device)
    _argmax_keys_kernel[(1,)](
        torch.tensor(values + [0.0] * pad, device=device),
        torch.tensor(index + [0] * pad, dtype=torch.int32, device=device), out, N=16,
    )  # fmt: skip
    keys = out[: len(values)].tolist()
    assert keys[3] == keys[4]  # -0 and +0 are equal logits
    ordered = keys[:3] + keys[4:8]
    assert ordered == sorted(ordered) and len(set(ordered)) == len(ordered)
    assert keys[6] < keys[8] < keys[9] < keys[7]  # 2.0 at ids 7, 3, 0, then +inf
    assert min(keys) > 0  # above the zeroed buffer


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_greedy_head_orders_signs_zeros_and_repeats(dtype: torch.dtype, device: str) -> None:
    # Logits of both signs, -0 against +0, infinities; every call a fresh argmax (the keys
    # carry nothing from one call to the next, even when the second call's best is lower).
    V, K = 600, 16
    x = torch.ones(1, K, device=device, dtype=dtype)
    norm_w = torch.ones(K, device=device, dtype=dtype)
    tokens = torch.zeros(1, dtype=torch.int64, device=device)
    pos = torch.zeros(1, dtype=torch.int32, device=device)
    cases = {
        "all negative": (-torch.arange(1, V + 1).float() / V, 0),
        "-0 before +0": (torch.cat([-torch.ones(4), torch.tensor([-0.0, 0.0])]), 4),
        "inf at the end": (torch.cat([torch.zeros(V - 1), torch.tensor([float("inf")])]), V - 1),
        # after the +inf key of the case before: a key left behind would win
        "lower best later": (torch.tensor([-5.0, -2.0] + [-5.0] * (V - 2)), 1),
        "one row": (torch.tensor([-7.0]), 0),
    }
    for what, (logits, want) in cases.items():
        lm_head = (logits[:, None] / K).expand(-1, K).contiguous().to(device, dtype)
        decode.greedy_head(x, norm_w, lm_head, EPS, tokens, pos, pos + 1)
        assert int(tokens[0]) == want, what


ATTN_CASES = [
    # B, Hq, Hkv, D, S, seq_lens, split (None: automatic)
    (1, 16, 8, 128, 40, [17], None),
    (1, 16, 8, 128, 300, [300], 4),
    (2, 6, 2, 64, 700, [600, 3], None),
    (3, 8, 8, 64, 300, [1, 299, 150], 3),
    (2, 5, 1, 128, 90, [90, 64], 8),  # splits past the shorter sequence are empty
    (2, 4, 2, 32, 200, [64, 65], 4),  # one chunk exactly (written directly), then two
]
# How split chunks are merged: in the attention launch (tickets) or by a second kernel.
# All of them the Triton kernels: on a GPU the default takes the CUDA one-pass kernel for
# bounds <= 256 (tested apart, below).
COMBINES = {
    "ticket": decode.DecodeTuning(ticket_combine=True, cuda_direct=False),
    "kernel": decode.DecodeTuning(cuda_direct=False),
    # 64-row tiles throughout, one program per kv head up to 256 positions (several tiles)
    "wide-tiles": decode.DecodeTuning(
        short_block_n=0, direct_max=256, min_chunk=64, cuda_direct=False
    ),
    "short-1warp": decode.DecodeTuning(
        short_block_n=16, short_warps=1, short_max=512, cuda_direct=False
    ),
    # the default runs the first bucket's products on the CUDA cores; these on tensor cores
    "short-mma": decode.DecodeTuning(short_mma=True, short_max=512, cuda_direct=False),
}


def _attention_inputs(B, hq, hkv, D, S, lens, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    qkv = _randn(B, (hq + 2 * hkv) * D, g=g, dtype=dtype, device=device, scale=2.0)
    q_norm = (1 + 0.2 * torch.randn(D, generator=g)).to(device, dtype)
    k_norm = (1 + 0.2 * torch.randn(D, generator=g)).to(device, dtype)
    cos, sin = rope.rope_table(D, 1_000_000.0, S, device)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    k_cache = _randn(B, hkv, S, D, g=g, dtype=dtype, device=device)
    v_cache = _randn(B, hkv, S, D, g=g, dtype=dtype, device=device)
    for b, n in enumerate(lens):  # junk past seq_lens (the new token goes to n - 1)
        k_cache[b, :, n:] = float("nan")
        v_cache[b, :, n:] = float("nan")
        k_cache[b, :, n - 1] = 1000.0
        v_cache[b, :, n - 1] = -1000.0
    return qkv, q_norm, k_norm, cos, sin, seq_lens - 1, k_cache, v_cache, seq_lens


def _tickets_are_zero(device) -> bool:
    return all(
        int(t.abs().sum()) == 0 for key, kept in layer._KEPT.items() for t in kept
        if key[1] == torch.device(device).type
    )  # fmt: skip


# (B, hq, hkv, S, lens, tiles_from): two tiles a warp. Lengths that end in a warp's first
# tile (its second dead), in its second (the new row there), on a tile's first row, past 2,048
# (clusters of 5-8), a single CTA of 16 warps at batch 8, and 4 query heads a kv head.
CUDA_TILES_CASES = [
    (1, 16, 8, 4096, [4096], 2049),
    (1, 16, 8, 3000, [2999], 2049),
    (2, 8, 4, 2600, [2049, 2600], 2049),
    (1, 16, 8, 512, [300], 257),
    (1, 16, 8, 512, [257], 257),
    (8, 16, 8, 512, [512, 1, 257, 300, 511, 17, 400, 450], 257),
    (3, 4, 2, 1100, [1100, 530, 17], 257),
    (1, 32, 8, 4096, [3500], 2049),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("B,hq,hkv,S,lens,tiles_from", CUDA_TILES_CASES)
def test_cuda_attention_two_tiles_a_warp_match_composition(B, hq, hkv, S, lens, tiles_from, dtype):
    from evokernel.ops import attention_cuda

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the CUDA attention needs sm_90+")
    D, scale = 128, 128**-0.5
    inputs = _attention_inputs(B, hq, hkv, D, S, lens, dtype, "cuda", seed=B + S + tiles_from)
    qkv, kc = inputs[0], inputs[6]
    tuning = decode.DecodeTuning(cuda_direct_max=4096, cuda_tiles_from=tiles_from)
    split = attention_cuda.split_for(qkv, kc, hq, S, 4096, tuning.cuda_cluster, True, tiles_from)
    assert split is not None and split.tiles == 2, split
    _check_fused_attention(inputs, hq, S, scale, tuning, "CUDA attention, two tiles a warp")


@pytest.mark.parametrize("combine", COMBINES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,hq,hkv,D,S,lens,split", ATTN_CASES)
def test_fused_attention_matches_its_composition(
    B, hq, hkv, D, S, lens, split, dtype, combine, device
):
    qkv, qn, kn, cos, sin, pos, kc, vc, seq = _attention_inputs(
        B, hq, hkv, D, S, lens, dtype, device, seed=B * 7 + S
    )
    ref_kc, ref_vc = kc.clone(), vc.clone()
    scale = D**-0.5
    tuning = COMBINES[combine]
    got = decode.decode_attention_qkv(
        qkv, qn, kn, cos, sin, pos, kc, vc, seq, scale, EPS, S, split=split, tuning=tuning
    )
    want = REF.decode_attention_qkv(qkv, qn, kn, cos, sin, pos, ref_kc, ref_vc, seq, scale, EPS, S)
    assert_close(got, want, f"attention (split {split}, {combine})")
    # The cache: the new token's K/V written at its position, everything else untouched.
    assert_close(kc.nan_to_num(7.0), ref_kc.nan_to_num(7.0), "k_cache")
    assert_close(vc.nan_to_num(7.0), ref_vc.nan_to_num(7.0), "v_cache")
    assert _tickets_are_zero(device)  # left as found, for the next launch


# The CUDA C++ one-pass kernel's shapes (head_dim 128, 2 or 4 query heads per kv head, bounds
# up to 256): warps with no live row, the new row in any warp's rows, sequences of one row.
CUDA_DIRECT_CASES = [
    # B, Hq, Hkv, S, seq_lens
    (1, 16, 8, 128, [33]),
    (2, 16, 8, 256, [256, 1]),
    (3, 4, 2, 40, [17, 40, 1]),
    (1, 4, 2, 16, [16]),
    (2, 8, 4, 200, [150, 9]),
    (2, 4, 2, 48, [48, 2]),  # 3 warps: fewer threads than the 128 output items
    (1, 32, 8, 128, [1]),  # 4 query heads a kv head (Qwen3-4B/8B), one row
    (2, 16, 4, 256, [256, 17]),
    (3, 8, 2, 48, [48, 2, 31]),  # 3 warps: fewer threads than the 256 output items
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("B,hq,hkv,S,lens", CUDA_DIRECT_CASES)
def test_cuda_attention_matches_composition_and_triton(B, hq, hkv, S, lens, dtype) -> None:
    from evokernel.ops import attention_cuda

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the CUDA attention needs sm_90+")
    D, scale = 128, 128**-0.5
    inputs = _attention_inputs(B, hq, hkv, D, S, lens, dtype, "cuda", seed=B + S)
    qkv, qn, kn, cos, sin, pos, kc, vc, seq = inputs
    assert attention_cuda.applies(qkv, kc, hq, S), "nvcc builds it on every sm_90 test machine"
    ref_kc, ref_vc = kc.clone(), vc.clone()
    tri_kc, tri_vc = kc.clone(), vc.clone()
    got = decode.decode_attention_qkv(qkv, qn, kn, cos, sin, pos, kc, vc, seq, scale, EPS, S)
    want = REF.decode_attention_qkv(qkv, qn, kn, cos, sin, pos, ref_kc, ref_vc, seq, scale, EPS, S)
    triton = decode.decode_attention_qkv(
        qkv, qn, kn, cos, sin, pos, tri_kc, tri_vc, seq, scale, EPS, S,
        tuning=decode.DecodeTuning(cuda_direct=False),
    )  # fmt: skip
    assert_close(got, want, "CUDA attention")
    assert_close(got, triton, "CUDA against Triton")
    assert_close(kc.nan_to_num(7.0), ref_kc.nan_to_num(7.0), "k_cache")
    assert_close(vc.nan_to_num(7.0), ref_vc.nan_to_num(7.0), "v_cache")


# Bounds past one CTA: a cluster of CTAs per kv head (at least 1, 4 or 8), the new row in the
# first row of a later CTA, CTAs with no live row, clusters of 2 to 8.
CUDA_CLUSTER_CASES = [
    # B, Hq, Hkv, S, seq_lens, min_cluster
    (1, 16, 8, 1024, [1000], 4),
    (1, 16, 8, 2048, [2048], 4),
    (2, 8, 4, 2048, [2048, 1], 4),
    (1, 16, 8, 512, [257], 1),
    (3, 4, 2, 700, [300, 700, 17], 8),
    (2, 4, 2, 300, [129, 65], 4),
    (1, 32, 8, 1024, [1000], 4),  # 4 query heads a kv head
    (2, 16, 4, 700, [300, 700], 8),
]


def _check_fused_attention(inputs, hq, S, scale, tuning, what) -> None:
    """The engine's fused attention with `tuning` against the composition: out and both
    caches (the new row appended, nothing else written)."""
    qkv, qn, kn, cos, sin, pos, kc, vc, seq = inputs
    ref_kc, ref_vc = kc.clone(), vc.clone()
    got = decode.decode_attention_qkv(
        qkv, qn, kn, cos, sin, pos, kc, vc, seq, scale, EPS, S, tuning=tuning
    )
    want = REF.decode_attention_qkv(qkv, qn, kn, cos, sin, pos, ref_kc, ref_vc, seq, scale, EPS, S)
    assert_close(got, want, what)
    assert_close(kc.nan_to_num(7.0), ref_kc.nan_to_num(7.0), "k_cache")
    assert_close(vc.nan_to_num(7.0), ref_vc.nan_to_num(7.0), "v_cache")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("B,hq,hkv,S,lens,cluster", CUDA_CLUSTER_CASES)
def test_cuda_attention_clusters_match_composition(B, hq, hkv, S, lens, cluster, dtype) -> None:
    from evokernel.ops import attention_cuda

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the CUDA attention needs sm_90+")
    D, scale = 128, 128**-0.5
    inputs = _attention_inputs(B, hq, hkv, D, S, lens, dtype, "cuda", seed=B + S + cluster)
    qkv, kc = inputs[0], inputs[6]
    tuning = decode.DecodeTuning(cuda_cluster=cluster, cuda_tiles=False)  # one tile a warp
    assert attention_cuda.applies(qkv, kc, hq, S, tuning.cuda_direct_max, cluster)
    assert not attention_cuda.applies(qkv, kc, hq, S, 256)  # beyond a bound of 256
    _check_fused_attention(inputs, hq, S, scale, tuning, "CUDA attention, clusters")


@pytest.mark.parametrize("combine", COMBINES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,hq,hkv,D,S,lens,split", ATTN_CASES)
def test_plain_attention_matches_reference(B, hq, hkv, D, S, lens, split, dtype, combine, device):
    g = torch.Generator().manual_seed(S)
    *_, kc, vc, seq = _attention_inputs(B, hq, hkv, D, S, lens, dtype, device, seed=S)
    q = _randn(B, hq, D, g=g, dtype=dtype, device=device)
    tuning = COMBINES[combine]
    got = decode.decode_attention(q, kc, vc, seq, D**-0.5, split=split, tuning=tuning)
    assert_close(got, REF.decode_attention(q, kc, vc, seq, D**-0.5), "attention")
    again = decode.decode_attention(q, kc, vc, seq, D**-0.5, split=split, tuning=tuning)
    assert torch.equal(got, again)  # the tickets carried nothing from the first call


def test_ticket_buffers_grow_and_are_kept(device) -> None:
    dev = torch.device(device)
    small = decode.attention_tickets(dev, 8)
    assert small.dtype == torch.int32 and small.numel() >= 8 and int(small.abs().sum()) == 0
    assert decode.attention_tickets(dev, small.numel()) is small  # the same address again
    big = decode.attention_tickets(dev, small.numel() + 1)
    assert big.numel() > small.numel()
    kept = [t for (_, kind, _), ts in layer._KEPT.items() if kind == dev.type for t in ts]
    assert any(t is small for t in kept)  # a graph captured with it may still replay


def test_attention_split_fills_the_gpu_and_stays_a_power_of_two(monkeypatch) -> None:
    monkeypatch.setattr(layer, "sm_count", lambda device: 132)  # an H100/H200
    cuda = torch.device("cuda")
    bounds = (1, 16, 17, 100, 256, 257, 1024, 4096, 32768)
    splits = {n: decode.attention_split(n, 8, cuda) for n in bounds}
    assert splits[1] == splits[16] == 1  # one pass up to direct_max
    assert splits[17] == 2 and splits[100] == 8 and splits[256] == 16  # one-tile chunks
    assert splits[257] == splits[1024] == splits[4096] == splits[32768] == 32  # 256 programs
    assert all(s & (s - 1) == 0 for s in splits.values())
    assert decode.attention_split(32768, 64, cuda) == 4  # batch 8: the batch fills the GPU
    wide = decode.DecodeTuning(min_chunk=64, direct_max=256)
    assert [decode.attention_split(n, 8, cuda, wide) for n in (256, 257, 1089)] == [1, 8, 32]


@pytest.mark.gpu
def test_ticket_merge_holds_over_many_graph_replays() -> None:
    """Tickets under contention: one split attention launch (16 chunks, 8 kv heads, 2 rows)
    captured in a CUDA graph and replayed at 60 random lengths, each replay against the torch
    reference; the counters are zero after every replay."""
    B, hq, hkv, D, S = 2, 16, 8, 128, 2048
    g = torch.Generator().manual_seed(5)
    q = _randn(B, hq, D, g=g, dtype=torch.bfloat16, device="cuda")
    kc = _randn(B, hkv, S, D, g=g, dtype=torch.bfloat16, device="cuda")
    vc = _randn(B, hkv, S, D, g=g, dtype=torch.bfloat16, device="cuda")
    seq = torch.full((B,), S, dtype=torch.int32, device="cuda")
    scale = D**-0.5
    tickets = COMBINES["ticket"]
    decode.decode_attention(q, kc, vc, seq, scale, split=16, tuning=tickets)  # tickets allocated
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = decode.decode_attention(q, kc, vc, seq, scale, split=16, tuning=tickets)
    lengths = torch.randint(1, S + 1, (60, B), generator=g)
    for row in lengths:
        seq.copy_(row.to(torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, REF.decode_attention(q, kc, vc, seq, scale), f"lengths {row.tolist()}")
        assert _tickets_are_zero("cuda")


def test_whole_k_rows_apply_up_to_their_rows_k_and_shared_memory(monkeypatch) -> None:
    t = decode.DEFAULT
    cpu = torch.device("cpu")
    # Qwen3-0.6B at 8 rows: qkv, o_proj and the head whole-K; down (K 3,072 -> 4,096) split.
    assert layer.rows_whole_k_blocks(8, 1024, 2, cpu, t) == (8, 16, 8, 128, 4)
    assert layer.rows_whole_k_blocks(8, 2048, 2, cpu, t) == (8, 16, 16, 128, 8)
    assert layer.rows_whole_k_blocks(8, 3072, 2, cpu, t) is None
    # gate_up: 8 gate and 8 up rows a program (a slab of 16 weight rows)
    assert layer.rows_whole_k_blocks(8, 1024, 2, cpu, t, tiles=2) == (8, 8, 8, 128, 4)
    assert layer.rows_whole_k_blocks(9, 1024, 2, cpu, t) is None  # past 8 rows
    assert layer.rows_whole_k_blocks(3, 1024, 2, cpu, t)[0] == 8  # the row tile
    assert layer.rows_whole_k_blocks(16, 64, 2, cpu, t._replace(rows_whole_k_rows=16))[0] == 16
    # a device whose shared memory cannot hold the slab and x's tile keeps the split kernel
    monkeypatch.setattr(layer, "shared_limit", lambda device: 48 * 1024)
    assert layer.rows_whole_k_blocks(8, 1024, 2, cpu, t) is not None  # 32 + 16 KB
    assert layer.rows_whole_k_blocks(8, 2048, 2, cpu, t) is None  # 64 + 32 KB


def test_stream_rows_split_k_to_fill_the_sms_in_whole_chunks(monkeypatch) -> None:
    monkeypatch.setattr(layer, "sm_count", lambda device: 132)
    monkeypatch.setattr(layer, "shared_limit", lambda device: 232448)
    t, cpu = decode.DEFAULT, torch.device("cpu")
    blocks = layer.rows_stream_blocks
    # Qwen3-0.6B at 32 rows: (BLOCK_M, BLOCK_N, BLOCK_K, K_PER, SPLIT, STAGES, PREFETCH, warps)
    assert blocks(32, 4096, 1024, 2, cpu, t) == (32, 64, 128, 512, 2, 4, 2, 4)  # qkv
    # the deep ops (K >= 2N) from 17 rows: 16 columns a program, chunks of 512, K split in two
    assert blocks(32, 1024, 2048, 2, cpu, t) == (32, 16, 512, 1024, 2, 4, 2, 4)  # o_proj
    assert blocks(32, 1024, 3072, 2, cpu, t)[1:7] == (16, 512, 1536, 2, 4, 2)  # down
    assert blocks(17, 1024, 3072, 2, cpu, t)[1] == 16
    shallow = t._replace(stream_deep_n=0, stream_deep_k=0)
    assert blocks(32, 1024, 2048, 2, cpu, shallow)[1:5] == (64, 128, 256, 8)  # o_proj
    assert blocks(16, 1024, 2048, 2, cpu, t) == blocks(16, 1024, 2048, 2, cpu, shallow)
    assert blocks(32, 1024, 3072, 2, cpu, shallow)[3:7] == (384, 8, 4, 2)  # down
    # three chunks a program, four asked of L2 (a power of two; the kernel masks past K_PER)
    assert blocks(32, 1024, 3072, 2, cpu, shallow._replace(stream_prefetch=3))[6] == 4
    assert blocks(32, 3072, 1024, 2, cpu, t, tiles=2)[4] == 2  # gate_up
    assert blocks(32, 151936, 1024, 2, cpu, t)[4] == 1  # the head
    assert blocks(3, 64, 40, 2, cpu, t)[:5] == (16, 64, 64, 64, 1)
    # a ragged split: every program at least one chunk, the last one short
    assert blocks(8, 16, 130, 2, cpu, t._replace(stream_block_k=32))[:5] == (16, 64, 32, 64, 3)
    # stages cut to what shared memory holds: 64 KB a stage for gate_up with chunks of 512
    wide = t._replace(stream_block_n=16, stream_block_k=512, stream_stages=6)
    assert blocks(32, 3072, 1024, 2, cpu, wide, tiles=2)[5] == 3
    assert blocks(65, 4096, 1024, 2, cpu, t) is None  # past rows_block_m
    assert blocks(8, 4096, 1024, 2, cpu, t._replace(rows_stream=False)) is None


def test_cuda_attention_plan_clusters_only_on_half_the_sms() -> None:
    from evokernel.ops.attention_cuda import plan

    assert plan(1, 8, 200, 4, 132) == (13, 1, 1)  # one CTA up to 256 rows
    assert plan(1, 8, 512, 4, 132) == (8, 4, 1)  # at least 4 CTAs beyond
    assert plan(1, 8, 1024, 4, 132) == (16, 4, 1)
    assert plan(1, 8, 2048, 4, 132) == (16, 8, 1)  # 16 warps of 16 rows a CTA at most
    assert plan(1, 8, 2049, 4, 132) is None
    assert plan(2, 4, 1024, 4, 132) == (16, 4, 1)  # 32 CTAs
    assert plan(4, 8, 1024, 4, 132) is None  # 128 CTAs: the Triton kernels
    assert plan(8, 8, 256, 4, 132) == (16, 1, 1)


def test_cuda_attention_plan_two_tiles_a_warp_from_their_bound() -> None:
    from evokernel.ops.attention_cuda import plan

    # from tiles_from rows: 512 rows a CTA, a cluster of cdiv(rows, 512) (no min_cluster)
    assert plan(1, 8, 2049, 4, 132, False, 2049) == (13, 5, 2)
    assert plan(1, 8, 4096, 4, 132, False, 2049) == (16, 8, 2)
    assert plan(1, 8, 4097, 4, 132, False, 2049) is None
    assert plan(1, 8, 2048, 4, 132, False, 2049) == (16, 8, 1)  # below it: one tile
    assert plan(1, 8, 300, 4, 132, False, 257) == (10, 1, 2)
    # a single CTA a head at any batch; clusters while the grid takes half the SMs, else
    # the one-tile rule (here: Triton)
    assert plan(8, 8, 512, 4, 132, False, 257) == (16, 1, 2)
    assert plan(8, 8, 513, 4, 132, False, 257) is None
    assert plan(4, 8, 1024, 4, 132, False, 257) == (16, 2, 2)
    assert plan(32, 8, 200, 4, 132, False, 257) == (13, 1, 1)
    # two_tiles: two tiles only where the one-tile clusters exceed half the SMs
    assert plan(1, 8, 1500, 4, 132, True) == (16, 6, 1)
    assert plan(8, 8, 300, 4, 132, True) == (10, 1, 2)
    assert plan(8, 8, 300, 4, 132) is None  # without: Triton
    assert plan(4, 8, 1000, 4, 132, True) == (16, 2, 2)
    assert plan(8, 8, 600, 4, 132, True) is None  # two tiles: 128 CTAs a batch of 8


def test_short_tiles_apply_up_to_their_bound() -> None:
    tuning = decode.DecodeTuning(short_block_n=32)
    assert [tuning.attention_block_n(n) for n in (1, 256, 257, 4096)] == [32, 32, 64, 64]
    assert decode.DEFAULT.attention_block_n(1) == decode.DEFAULT.short_block_n == 16
    assert decode.DecodeTuning(short_block_n=0).attention_block_n(1) == decode.DEFAULT.attn_block_n
    tuning = decode.DecodeTuning(short_warps=2)
    assert [tuning.attention_warps(n) for n in (1, 256, 257)] == [2, 2, decode.DEFAULT.attn_warps]
    assert decode.DEFAULT.attention_warps(1) == decode.DEFAULT.attn_warps
    with pytest.raises(AssertionError, match="short_block_n"):
        check_tuning(decode.DecodeTuning(short_block_n=24))
    with pytest.raises(AssertionError):
        check_tuning(decode.DecodeTuning(short_warps=3))
    with pytest.raises(AssertionError, match="rows"):
        check_tuning(decode.DecodeTuning(rows_block_n=24))
