"""Decode GEMV kernels (a few rows times a weight matrix) with their prologues and epilogues fused.

Batch-1 decode reads every weight once per token, so each projection is a bandwidth problem:
program p owns BLOCK_N rows of the weight W [N, K] and loads its whole [BLOCK_N, K] tile in one
go (BLOCK_K = next power of two >= K; 32-64 KB per program, all loads in flight at once) into
registers, *before* it waits on the previous kernel (programmatic dependent launch: with
PDL=True the launcher sets `launch_pdl` and the weights stream in while the previous kernel
finishes). Only then does it read the activations the previous kernel wrote, and computes
y[m, n] = sum_k W[n, k] * x[m, k] on the CUDA cores in float32 for each of the M <= BLOCK_M
rows. Weights are loaded with `evict_first`: they are read once per step and must not push the
activations out of L2.

  norm_gemv_kernel      y = W @ rms_norm(x)                      (qkv projection)
  gemv_add_kernel       res += W @ x, in place                   (o_proj, down_proj + residual)
  norm_gate_up_kernel   act = silu(Wg @ n) * (Wu @ n), n = rms_norm(x)   (gate/up + SiLU-mul)
  norm_head_kernel      per program: max/argmax of round(W @ rms_norm(x)) over its rows, and
                        optionally the logits themselves (final norm + lm_head)
  argmax_finish_kernel  the token = argmax over the partials; optionally advances the step's
                        positions and seq_lens (the decode step's last kernel)

Rounding follows transformers' Qwen3 in the model dtype: the norm rounds to the dtype before and
after its weight, every projection output is rounded, the residual sum is rounded, SiLU rounds
and the product rounds. Greedy argmax compares the logits rounded to the model dtype (what the
reference's lm_head returns), with ties going to the lowest id.

Every kernel with PDL=True calls gdc_wait() before it reads anything an earlier kernel wrote and
before it writes anything, and calls gdc_launch_dependents() early, so a chain of these kernels
is ordered as if launched plainly (each wait completes only after the previous kernel, which
itself waited on its predecessor, has finished): kernels/overlap.py.
"""

import triton
import triton.language as tl

from evokernel.kernels.overlap import pdl_enter


@triton.jit
def _weight_tile(w_ptr, rows, N, stride_w, K: tl.constexpr, BLOCK_K: tl.constexpr):
    """W[rows, :K] as a [BLOCK_N, BLOCK_K] tile in the weight dtype (masked rows/cols are 0)."""
    cols = tl.arange(0, BLOCK_K)
    ptrs = w_ptr + rows[:, None].to(tl.int64) * stride_w + cols[None, :]
    mask = (rows[:, None] < N) & (cols[None, :] < K)
    return tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")


@triton.jit
def _input_row(x_ptr, norm_w, cols, eps, K: tl.constexpr, NORM: tl.constexpr):
    """One activation row [BLOCK_K] as float32; with NORM the RMS-normalised row, rounded as
    transformers rounds (to the dtype before and after the weight `norm_w`, float32 [BLOCK_K])."""
    x = tl.load(x_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
    if NORM:
        dtype = x_ptr.dtype.element_ty
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / K + eps)
        x = ((x * rstd).to(dtype).to(tl.float32) * norm_w).to(dtype).to(tl.float32)
    return x


@triton.jit
def _norm_weight(norm_ptr, cols, K: tl.constexpr, NORM: tl.constexpr):
    if NORM:
        return tl.load(norm_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
    return tl.zeros_like(cols.to(tl.float32))


@triton.jit
def norm_gemv_kernel(
    x_ptr,  # [M, K]
    norm_ptr,  # [K] RMSNorm weight (NORM only)
    w_ptr,  # [N, K]
    y_ptr,  # [M, N]
    M,
    N,
    stride_x,
    stride_w,
    stride_y,
    eps,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    NORM: tl.constexpr,
    PDL: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    w = _weight_tile(w_ptr, rows, N, stride_w, K, BLOCK_K)
    norm_w = _norm_weight(norm_ptr, cols, K, NORM)
    pdl_enter(PDL)
    for m in tl.static_range(BLOCK_M):
        if m < M:
            x = _input_row(x_ptr + m * stride_x, norm_w, cols, eps, K, NORM)
            y = tl.sum(w.to(tl.float32) * x[None, :], axis=1)
            tl.store(y_ptr + m * stride_y + rows, y.to(y_ptr.dtype.element_ty), mask=rows < N)


@triton.jit
def gemv_add_kernel(
    x_ptr,  # [M, K]
    w_ptr,  # [N, K]
    res_ptr,  # [M, N] the residual stream, updated in place: res += round(W @ x)
    M,
    N,
    stride_x,
    stride_w,
    stride_res,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    w = _weight_tile(w_ptr, rows, N, stride_w, K, BLOCK_K)
    pdl_enter(PDL)
    dtype = res_ptr.dtype.element_ty
    for m in tl.static_range(BLOCK_M):
        if m < M:
            # The residual is loaded with x, before the reduction: both L2 round trips overlap.
            x = tl.load(x_ptr + m * stride_x + cols, mask=cols < K, other=0.0).to(tl.float32)
            res_rows = res_ptr + m * stride_res + rows
            r = tl.load(res_rows, mask=rows < N, other=0.0).to(tl.float32)
            y = tl.sum(w.to(tl.float32) * x[None, :], axis=1).to(dtype).to(tl.float32)
            tl.store(res_rows, (r + y).to(dtype), mask=rows < N)


@triton.jit
def norm_gate_up_kernel(
    x_ptr,  # [M, K]
    norm_ptr,  # [K]
    w_ptr,  # [2I, K]: gate rows 0..I-1, up rows I..2I-1
    act_ptr,  # [M, I] out: silu(gate) * up
    M,
    I,
    stride_x,
    stride_w,
    stride_act,
    eps,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    wg = _weight_tile(w_ptr, rows, I, stride_w, K, BLOCK_K)
    wu = _weight_tile(w_ptr + I * stride_w, rows, I, stride_w, K, BLOCK_K)
    norm_w = _norm_weight(norm_ptr, cols, K, True)
    pdl_enter(PDL)
    dtype = act_ptr.dtype.element_ty
    for m in tl.static_range(BLOCK_M):
        if m < M:
            x = _input_row(x_ptr + m * stride_x, norm_w, cols, eps, K, True)
            g = tl.sum(wg.to(tl.float32) * x[None, :], axis=1).to(dtype).to(tl.float32)
            u = tl.sum(wu.to(tl.float32) * x[None, :], axis=1).to(dtype).to(tl.float32)
            s = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
            tl.store(act_ptr + m * stride_act + rows, (s * u).to(dtype), mask=rows < I)


@triton.jit
def norm_head_kernel(
    x_ptr,  # [M, K] the residual stream after the last layer
    norm_ptr,  # [K] final norm weight
    w_ptr,  # [V, K] lm_head
    best_ptr,  # [M, P] float32 out: each program's largest logit per row
    arg_ptr,  # [M, P] int32 out: its vocabulary id
    logits_ptr,  # [M, V] float32 out (WRITE_LOGITS only)
    M,
    V,
    P,
    stride_x,
    stride_w,
    stride_logits,
    eps,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    WRITE_LOGITS: tl.constexpr,
    PDL: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    w = _weight_tile(w_ptr, rows, V, stride_w, K, BLOCK_K)
    norm_w = _norm_weight(norm_ptr, cols, K, True)
    pdl_enter(PDL)
    dtype = x_ptr.dtype.element_ty
    for m in tl.static_range(BLOCK_M):
        if m < M:
            x = _input_row(x_ptr + m * stride_x, norm_w, cols, eps, K, True)
            logit = tl.sum(w.to(tl.float32) * x[None, :], axis=1).to(dtype).to(tl.float32)
            if WRITE_LOGITS:
                tl.store(logits_ptr + m * stride_logits + rows, logit, mask=rows < V)
            logit = tl.where(rows < V, logit, -float("inf"))
            best, arg = tl.max(
                logit, axis=0, return_indices=True, return_indices_tie_break_left=True
            )
            tl.store(best_ptr + m * P + pid, best)
            tl.store(arg_ptr + m * P + pid, pid * BLOCK_N + arg)


@triton.jit
def argmax_finish_kernel(
    best_ptr,  # [M, P] float32
    arg_ptr,  # [M, P] int32
    token_ptr,  # [M] int64 out
    pos_ptr,  # [M] int32, += 1 when ADVANCE
    seq_lens_ptr,  # [M] int32, += 1 when ADVANCE
    P,
    BLOCK_P: tl.constexpr,
    ADVANCE: tl.constexpr,
    PDL: tl.constexpr,
):
    """Program m: the largest of the P partials of row m (the lowest id among equals)."""
    m = tl.program_id(0)
    pdl_enter(PDL)
    top = -float("inf")
    top_arg = 0
    for p0 in range(0, P, BLOCK_P):
        offs = p0 + tl.arange(0, BLOCK_P)
        vals = tl.load(best_ptr + m * P + offs, mask=offs < P, other=-float("inf"))
        args = tl.load(arg_ptr + m * P + offs, mask=offs < P, other=0)
        best, where = tl.max(vals, axis=0, return_indices=True, return_indices_tie_break_left=True)
        arg = tl.sum(tl.where(tl.arange(0, BLOCK_P) == where, args, 0), axis=0)
        # Blocks go in id order, so an equal value in a later block never wins.
        better = best > top
        top_arg = tl.where(better, arg, top_arg)
        top = tl.where(better, best, top)
    tl.store(token_ptr + m, top_arg)  # widened to the int64 token buffer
    if ADVANCE:
        tl.store(pos_ptr + m, tl.load(pos_ptr + m) + 1)
        tl.store(seq_lens_ptr + m, tl.load(seq_lens_ptr + m) + 1)
