"""Batched decode GEMV on tensor cores: a batch of rows times a weight matrix, with the decode
kernels' prologues and epilogues fused (kernels/gemv.py does one row at a time on the CUDA
cores, which at B = 1 is the shorter path).

At batch B > 1 a step still reads every weight once, but the CUDA-core kernels redo each
weight tile's products row after row, each row's activations one L2 round trip after the
last. Here program n owns output columns [n*BLOCK_N, +BLOCK_N) and computes them for the
batch's rows in tiles of BLOCK_M (>= 16, rows past M masked to zero) as tensor-core dots in
float32. A dot of a 16 x 16 output tile is one warp's chain of MMAs, one per 16 of K, each
waiting for the last: so every chunk of K is cut into four slices whose dots are independent
chains the warp interleaves (a quarter of the latency), then summed. Two shapes:

  WHOLE_K   the program's whole weight tile [BLOCK_N, K] is loaded once, before the PDL wait
            (as the one-row kernels do), and kept in registers while the program walks the
            batch's row tiles: each tile's x [BLOCK_M, K] is one load, normalised in
            registers, one dot. Weights are read once whatever the batch.
  else      (K too wide for registers) K is walked in BLOCK_K chunks, the first weight chunk
            loaded before the PDL wait and the rest streamed through Triton's software
            pipeline; the grid's second axis holds the row tiles (weights re-read per row
            tile, mostly from L2); with NORM a first pass over x gives each row's 1/rms.

  NORM       x rows RMS-normalised first, rounded as transformers rounds (to the dtype before
             and after the norm weight)
  HAS_BIAS   + bias before the output's rounding (as cuBLAS's epilogue adds it)
  EPILOGUE   0: out = round(acc)                              (qkv)
             1: res = round(res + round(acc)), in place       (o_proj, down_proj)
             2: out = round(round(silu(round(acc_g))) * round(acc_u)), W = [gate rows; up
                rows], N = I                                   (gate_up + SiLU-mul)
             3: the head: logits round(acc) as float32 (WRITE_LOGITS) and/or each row's
                max/argmax over this program's columns folded into its int64 key by an atomic
                max (ARGMAX, kernels/gemv.py `argmax_key`)

Results equal the one-row kernels' up to float32 summation order (the dot's).
"""

import triton
import triton.language as tl

from evokernel.kernels.gemv import argmax_key
from evokernel.kernels.overlap import pdl_enter


@triton.jit
def _chunk(w_ptr, cols_n, N, stride_w, ks, K: tl.constexpr):
    """W[cols_n, ks] as a [BLOCK_N, BLOCK_K] tile (0 where masked), read once: evict_first."""
    ptrs = w_ptr + cols_n[:, None].to(tl.int64) * stride_w + ks[None, :]
    mask = (cols_n[:, None] < N) & (ks[None, :] < K)
    return tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")


@triton.jit
def _x_tile(x_ptr, rows_m, M, stride_x, ks, K: tl.constexpr):
    mask = (rows_m[:, None] < M) & (ks[None, :] < K)
    return tl.load(x_ptr + rows_m[:, None].to(tl.int64) * stride_x + ks[None, :], mask=mask,
                   other=0.0)  # fmt: skip


@triton.jit
def _normed(x, norm_ptr, rstd, ks, K: tl.constexpr, NORM: tl.constexpr):
    """x [BLOCK_M, BLOCK_K] in the dtype, normalised (NORM) as transformers rounds."""
    if NORM:
        dtype = x.dtype
        w = tl.load(norm_ptr + ks, mask=ks < K, other=0.0).to(tl.float32)
        x = (x.to(tl.float32) * rstd[:, None]).to(dtype).to(tl.float32) * w[None, :]
        x = x.to(dtype)
    return x


@triton.jit
def _dot_t(x, w, IEEE: tl.constexpr):
    """x [BM, BK] @ w [BN, BK]^T in float32."""
    if IEEE:
        return tl.dot(x, tl.trans(w), input_precision="ieee")
    return tl.dot(x, tl.trans(w))


@triton.jit
def _w4(w_ptr, cols_n, N, stride_w, k0, KS: tl.constexpr, K: tl.constexpr):
    """The four KS-wide slices of W[cols_n, k0 : k0 + 4 KS]."""
    offs = k0 + tl.arange(0, KS)
    a = _chunk(w_ptr, cols_n, N, stride_w, offs, K)
    b = _chunk(w_ptr, cols_n, N, stride_w, offs + KS, K)
    c = _chunk(w_ptr, cols_n, N, stride_w, offs + 2 * KS, K)
    d = _chunk(w_ptr, cols_n, N, stride_w, offs + 3 * KS, K)
    return a, b, c, d


@triton.jit
def _x4(x_ptr, rows_m, M, stride_x, k0, KS: tl.constexpr, K: tl.constexpr):
    """The four KS-wide slices of x[rows_m, k0 : k0 + 4 KS], in the dtype."""
    offs = k0 + tl.arange(0, KS)
    a = _x_tile(x_ptr, rows_m, M, stride_x, offs, K)
    b = _x_tile(x_ptr, rows_m, M, stride_x, offs + KS, K)
    c = _x_tile(x_ptr, rows_m, M, stride_x, offs + 2 * KS, K)
    d = _x_tile(x_ptr, rows_m, M, stride_x, offs + 3 * KS, K)
    return a, b, c, d


@triton.jit
def _sumsq(a, b, c, d):
    a = a.to(tl.float32)
    b = b.to(tl.float32)
    c = c.to(tl.float32)
    d = d.to(tl.float32)
    return (
        tl.sum(a * a, axis=1)
        + tl.sum(b * b, axis=1)
        + tl.sum(c * c, axis=1)
        + tl.sum(d * d, axis=1)
    )


@triton.jit
def _dot4(
    xa, xb, xc, xd, wa, wb, wc, wd, norm_ptr, rstd, k0, KS: tl.constexpr, K: tl.constexpr,
    NORM: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """sum over the four slices of normed(x_s) @ w_s^T: four independent MMA chains."""
    offs = k0 + tl.arange(0, KS)
    pa = _dot_t(_normed(xa, norm_ptr, rstd, offs, K, NORM), wa, IEEE)
    pb = _dot_t(_normed(xb, norm_ptr, rstd, offs + KS, K, NORM), wb, IEEE)
    pc = _dot_t(_normed(xc, norm_ptr, rstd, offs + 2 * KS, K, NORM), wc, IEEE)
    pd = _dot_t(_normed(xd, norm_ptr, rstd, offs + 3 * KS, K, NORM), wd, IEEE)
    return (pa + pb) + (pc + pd)


@triton.jit
def _epilogue(
    acc, acc_u, rows_m, cols_n, col0, M, N, bias, out_ptr, res_ptr, key_ptr, stride_out,
    stride_res, dtype: tl.constexpr, HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr,
    WRITE_LOGITS: tl.constexpr, ARGMAX: tl.constexpr,
):  # fmt: skip
    live = (rows_m[:, None] < M) & (cols_n[None, :] < N)
    if HAS_BIAS:
        acc += bias[None, :]
    y = acc.to(dtype).to(tl.float32)
    if EPILOGUE == 0:
        dst = out_ptr + rows_m[:, None].to(tl.int64) * stride_out + cols_n[None, :]
        tl.store(dst, y.to(dtype), mask=live)
    elif EPILOGUE == 1:
        dst = res_ptr + rows_m[:, None].to(tl.int64) * stride_res + cols_n[None, :]
        r = tl.load(dst, mask=live, other=0.0).to(tl.float32)
        tl.store(dst, (r + y).to(dtype), mask=live)
    elif EPILOGUE == 2:
        u = acc_u.to(dtype).to(tl.float32)
        s = (y / (1.0 + tl.exp(-y))).to(dtype).to(tl.float32)
        dst = out_ptr + rows_m[:, None].to(tl.int64) * stride_out + cols_n[None, :]
        tl.store(dst, (s * u).to(dtype), mask=live)
    else:
        if WRITE_LOGITS:
            dst = out_ptr + rows_m[:, None].to(tl.int64) * stride_out + cols_n[None, :]
            tl.store(dst, y, mask=live)
        if ARGMAX:
            y = tl.where(live, y, -float("inf"))
            best, arg = tl.max(y, axis=1, return_indices=True, return_indices_tie_break_left=True)
            key = argmax_key(best, col0 + arg)
            tl.atomic_max(key_ptr + rows_m, key, mask=rows_m < M, sem="relaxed", scope="gpu")


@triton.jit
def rows_gemv_kernel(
    x_ptr,  # [M, K]
    norm_ptr,  # [K] (NORM)
    w_ptr,  # [N, K]; EPILOGUE 2: [2N, K], gate rows then up rows
    bias_ptr,  # [N] (HAS_BIAS)
    out_ptr,  # [M, N] (EPILOGUE 0, 2), logits [M, N] float32 (EPILOGUE 3, WRITE_LOGITS)
    res_ptr,  # [M, N] the residual stream, updated in place (EPILOGUE 1)
    key_ptr,  # [M] int64 argmax keys (EPILOGUE 3, ARGMAX)
    M,
    N,
    stride_x,
    stride_w,
    stride_out,
    stride_res,
    eps,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,  # WHOLE_K: next_pow2(K); else the chunk
    WHOLE_K: tl.constexpr,
    NORM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    EPILOGUE: tl.constexpr,
    WRITE_LOGITS: tl.constexpr,
    ARGMAX: tl.constexpr,
    IEEE: tl.constexpr,
    PDL: tl.constexpr,
):
    col0 = tl.program_id(0) * BLOCK_N
    cols_n = col0 + tl.arange(0, BLOCK_N)
    KS: tl.constexpr = BLOCK_K // 4  # the slice width: a chunk is four slices
    up_ptr = w_ptr + N * stride_w  # EPILOGUE 2: the up rows (2N * K < 2**31 elements)
    dtype = x_ptr.dtype.element_ty
    wa, wb, wc, wd = _w4(w_ptr, cols_n, N, stride_w, 0, KS, K)
    ua, ub, uc, ud = wa, wb, wc, wd
    if EPILOGUE == 2:
        ua, ub, uc, ud = _w4(up_ptr, cols_n, N, stride_w, 0, KS, K)
    bias = tl.zeros([BLOCK_N], tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + cols_n, mask=cols_n < N, other=0.0).to(tl.float32)
    pdl_enter(PDL)

    if WHOLE_K:
        for m0 in range(0, M, BLOCK_M):
            rows_m = m0 + tl.arange(0, BLOCK_M)
            xa, xb, xc, xd = _x4(x_ptr, rows_m, M, stride_x, 0, KS, K)
            rstd = tl.zeros([BLOCK_M], tl.float32)
            if NORM:
                rstd = tl.rsqrt(_sumsq(xa, xb, xc, xd) / K + eps)
            acc = _dot4(xa, xb, xc, xd, wa, wb, wc, wd, norm_ptr, rstd, 0, KS, K, NORM, IEEE)
            acc_u = acc
            if EPILOGUE == 2:
                acc_u = _dot4(xa, xb, xc, xd, ua, ub, uc, ud, norm_ptr, rstd, 0, KS, K, NORM,
                              IEEE)  # fmt: skip
            _epilogue(acc, acc_u, rows_m, cols_n, col0, M, N, bias, out_ptr, res_ptr, key_ptr,
                      stride_out, stride_res, dtype, HAS_BIAS, EPILOGUE, WRITE_LOGITS,
                      ARGMAX)  # fmt: skip
    else:
        rows_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        rstd = tl.zeros([BLOCK_M], tl.float32)
        if NORM:
            for k0 in range(0, K, BLOCK_K):
                xa, xb, xc, xd = _x4(x_ptr, rows_m, M, stride_x, k0, KS, K)
                rstd += _sumsq(xa, xb, xc, xd)
            rstd = tl.rsqrt(rstd / K + eps)
        xa, xb, xc, xd = _x4(x_ptr, rows_m, M, stride_x, 0, KS, K)
        acc = _dot4(xa, xb, xc, xd, wa, wb, wc, wd, norm_ptr, rstd, 0, KS, K, NORM, IEEE)
        acc_u = acc
        if EPILOGUE == 2:
            acc_u = _dot4(xa, xb, xc, xd, ua, ub, uc, ud, norm_ptr, rstd, 0, KS, K, NORM, IEEE)
        for k0 in range(BLOCK_K, K, BLOCK_K):
            xa, xb, xc, xd = _x4(x_ptr, rows_m, M, stride_x, k0, KS, K)
            wa, wb, wc, wd = _w4(w_ptr, cols_n, N, stride_w, k0, KS, K)
            acc += _dot4(xa, xb, xc, xd, wa, wb, wc, wd, norm_ptr, rstd, k0, KS, K, NORM, IEEE)
            if EPILOGUE == 2:
                ua, ub, uc, ud = _w4(up_ptr, cols_n, N, stride_w, k0, KS, K)
                acc_u += _dot4(xa, xb, xc, xd, ua, ub, uc, ud, norm_ptr, rstd, k0, KS, K, NORM,
                               IEEE)  # fmt: skip
        _epilogue(acc, acc_u, rows_m, cols_n, col0, M, N, bias, out_ptr, res_ptr, key_ptr,
                  stride_out, stride_res, dtype, HAS_BIAS, EPILOGUE, WRITE_LOGITS,
                  ARGMAX)  # fmt: skip
