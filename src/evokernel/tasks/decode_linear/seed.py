"""Seed candidate for `decode_linear`: y = x @ W^T for a few rows (decode, M = 1..8).

Plain small-M GEMM in Triton: program (n, m, s) owns BLOCK_N output columns of a BLOCK_M-row
tile (BLOCK_M = 16, the smallest tl.dot tile; rows past M are masked) and walks the s-th of
SPLIT_K equal slices of K in BLOCK_K chunks, accumulating in float32 with tl.dot. Float32
inputs use IEEE products (no TF32), so a float32 call is a float32 computation.

SPLIT_K > 1 (split-K): each slice writes float32 partials [SPLIT_K, M, N] and `_splitk_reduce`
sums them in a fixed order: deterministic, no atomics. Narrow, deep projections (N = 1024,
K = 2048..3072) have too few BLOCK_N column tiles to fill a 132-SM GPU; split-K multiplies the
programs by SPLIT_K. The grid and the K slices depend on shapes only: no host sync, so the
call can be captured in a CUDA graph.

Bytes per call (dtype size e): W N*K*e (dominant, read once) + x M*K*e per column tile (L2)
+ y M*N*e; with SPLIT_K > 1 the partials add 2*SPLIT_K*M*N*4.
"""

import torch
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
BLOCK_N = 64  # tune: 32, 64, 128
BLOCK_K = 128  # tune: 128, 256
NUM_WARPS = 4  # tune: 4, 8
SPLIT_K = 1  # tune: 1, 2, 4, 8
BLOCK_M = 16
NUM_STAGES = 3  # pipelining depth of the K loop (largest tile: 72 KB shared on sm_90)


@triton.jit
def _linear_tile(
    x_ptr,
    w_ptr,
    y_ptr,
    M,
    N,
    K,
    k_per_split,
    stride_xm,
    stride_wn,
    stride_ym,
    stride_ys,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_s = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N

    k_start = pid_s * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        kk = k0 + offs_k
        mask_k = kk < k_end
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + kk[None, :],
            mask=mask_m[:, None] & mask_k[None, :],
            other=0.0,
        )  # [BLOCK_M, BLOCK_K]
        w = tl.load(
            w_ptr + offs_n[None, :] * stride_wn + kk[:, None],
            mask=mask_n[None, :] & mask_k[:, None],
            other=0.0,
        )  # [BLOCK_K, BLOCK_N]: W^T's tile
        if IEEE:
            acc += tl.dot(x, w, input_precision="ieee")
        else:
            acc += tl.dot(x, w)

    y_ptrs = y_ptr + pid_s * stride_ys + offs_m[:, None] * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _splitk_reduce(part_ptr, y_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in range(0, SPLIT_K):
        acc += tl.load(part_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x, weight):
    M, K = x.shape
    N = weight.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    # K slice per split, a multiple of BLOCK_K; trailing splits may be empty (they write zeros).
    k_per_split = triton.cdiv(triton.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    grid = (triton.cdiv(N, BLOCK_N), triton.cdiv(M, BLOCK_M), SPLIT_K)
    if SPLIT_K == 1:
        out, stride_ys = y, 0
    else:
        out = torch.empty((SPLIT_K, M, N), device=x.device, dtype=torch.float32)
        stride_ys = out.stride(0)
    _linear_tile[grid](
        x,
        weight,
        out,
        M,
        N,
        K,
        k_per_split,
        x.stride(0),
        weight.stride(0),
        N,
        stride_ys,
        IEEE=x.dtype == torch.float32,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K,
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )
    if SPLIT_K > 1:
        block = 1024
        _splitk_reduce[(triton.cdiv(M * N, block),)](
            out, y, M * N, SPLIT_K=SPLIT_K, BLOCK=block, num_warps=4
        )
    return y


# EVOLVE-BLOCK-END


def linear(x, weight):
    """y = x @ weight^T for a decode step.

    x:       [M, K]  activations (M = 1..8 in decode; any M works)
    weight:  [N, K]  weights, x's dtype
    returns  [M, N]  in x's dtype
    """
    assert x.dim() == 2 and weight.dim() == 2, "x [M, K], weight [N, K]"
    assert x.shape[1] == weight.shape[1], "x and weight must share K"
    assert x.dtype == weight.dtype, "x and weight share a dtype"
    assert x.device == weight.device, "x and weight on one device"
    assert x.stride(1) == 1 and weight.stride(1) == 1, "K must be the contiguous dim"
    return _launch(x, weight)
