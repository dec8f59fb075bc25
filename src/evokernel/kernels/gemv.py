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

  norm_gemv_kernel      y = W @ rms_norm(x) (+ bias)             (qkv projection)
  gemv_add_kernel       res += W @ x, in place                   (o_proj, down_proj + residual)
  norm_gate_up_kernel   act = silu(Wg @ n) * (Wu @ n), n = rms_norm(x)   (gate/up + SiLU-mul)
  norm_head_kernel      round(W @ rms_norm(x)) (final norm + lm_head): the logits, and/or each
                        program's max/argmax folded into one int64 key per row by an atomic
                        max (`argmax_key`: value, then lowest id, in one integer)
  argmax_finish_kernel  the token from the key, the key reset to 0; optionally advances the
                        step's positions and seq_lens (the decode step's last kernel)

These are the one-row-at-a-time kernels (CUDA cores; each row's products in registers against
the program's weight tile); batches of rows go to kernels/rows.py's tensor-core kernel.

Rounding follows transformers in the model dtype: the norm rounds to the dtype before and
after its weight, every projection output is rounded (a bias is added before that rounding,
as cuBLAS's epilogue adds it), the residual sum is rounded, SiLU rounds and the product
rounds. Greedy argmax compares the logits rounded to the model dtype (what the
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
    bias_ptr,  # [N] (HAS_BIAS only)
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
    HAS_BIAS: tl.constexpr,
    PDL: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    w = _weight_tile(w_ptr, rows, N, stride_w, K, BLOCK_K)
    norm_w = _norm_weight(norm_ptr, cols, K, NORM)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + rows, mask=rows < N, other=0.0).to(tl.float32)
    pdl_enter(PDL)
    for m in tl.static_range(BLOCK_M):
        if m < M:
            x = _input_row(x_ptr + m * stride_x, norm_w, cols, eps, K, NORM)
            y = tl.sum(w.to(tl.float32) * x[None, :], axis=1)
            if HAS_BIAS:
                y += bias
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
    w_ptr,  # [2 INTER, K]: gate rows 0..INTER-1, then up rows
    act_ptr,  # [M, INTER] out: silu(gate) * up
    M,
    INTER,
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
    wg = _weight_tile(w_ptr, rows, INTER, stride_w, K, BLOCK_K)
    wu = _weight_tile(w_ptr + INTER * stride_w, rows, INTER, stride_w, K, BLOCK_K)
    norm_w = _norm_weight(norm_ptr, cols, K, True)
    pdl_enter(PDL)
    dtype = act_ptr.dtype.element_ty
    for m in tl.static_range(BLOCK_M):
        if m < M:
            x = _input_row(x_ptr + m * stride_x, norm_w, cols, eps, K, True)
            g = tl.sum(wg.to(tl.float32) * x[None, :], axis=1).to(dtype).to(tl.float32)
            u = tl.sum(wu.to(tl.float32) * x[None, :], axis=1).to(dtype).to(tl.float32)
            s = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
            tl.store(act_ptr + m * stride_act + rows, (s * u).to(dtype), mask=rows < INTER)


@triton.jit
def argmax_key(value, index):
    """An int64 ordered as greedy argmax orders (value, index) pairs: the larger value first,
    then the lower index. value float32 (+0 and -0 equal; a NaN above every number), index in
    [0, 2**24). Keys are positive, so 0 is below every key."""
    value = tl.where(value == 0.0, 0.0, value)  # -0 -> +0
    bits = value.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    ordered = tl.where(bits >= 0x80000000, 0xFFFFFFFF - bits, bits + 0x80000000)
    return ordered * 0x1000000 + (0xFFFFFF - index.to(tl.int64))


@triton.jit
def head_store(logit, row0, rows, V, logits_row_ptr, key_ptr, WRITE_LOGITS: tl.constexpr,
               ARGMAX: tl.constexpr):  # fmt: skip
    """A head program's end for one input row: its logits [BLOCK_N] (rows `rows` = row0 + 0..,
    live below V) stored, and/or their argmax merged into the row's key by an atomic max."""
    if WRITE_LOGITS:
        tl.store(logits_row_ptr + rows, logit, mask=rows < V)
    if ARGMAX:
        logit = tl.where(rows < V, logit, -float("inf"))
        best, arg = tl.max(logit, axis=0, return_indices=True, return_indices_tie_break_left=True)
        tl.atomic_max(key_ptr, argmax_key(best, row0 + arg), sem="relaxed", scope="gpu")


@triton.jit
def norm_head_kernel(
    x_ptr,  # [M, K] the residual stream after the last layer
    norm_ptr,  # [K] final norm weight
    w_ptr,  # [V, K] lm_head
    key_ptr,  # [M] int64: atomic max of argmax_key over this launch's rows (ARGMAX only)
    logits_ptr,  # [M, V] float32 out (WRITE_LOGITS only)
    M,
    V,
    stride_x,
    stride_w,
    stride_logits,
    eps,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    WRITE_LOGITS: tl.constexpr,
    ARGMAX: tl.constexpr,
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
            head_store(logit, pid * BLOCK_N, rows, V, logits_ptr + m * stride_logits, key_ptr + m,
                       WRITE_LOGITS, ARGMAX)  # fmt: skip


@triton.jit
def argmax_finish_kernel(
    key_ptr,  # [M] int64: the head's argmax keys, reset to 0 here
    token_ptr,  # [M] int64 out
    pos_ptr,  # [M] int32, += 1 when ADVANCE
    seq_lens_ptr,  # [M] int32, += 1 when ADVANCE
    M,
    BLOCK_M: tl.constexpr,
    ADVANCE: tl.constexpr,
    PDL: tl.constexpr,
):
    """The token of each row from its key (the index in its low 24 bits); the keys go back
    to 0 for the next launch of the head."""
    rows = tl.arange(0, BLOCK_M)
    live = rows < M
    pdl_enter(PDL)
    key = tl.load(key_ptr + rows, mask=live, other=0)
    tl.store(key_ptr + rows, tl.zeros_like(key), mask=live)
    tl.store(token_ptr + rows, 0xFFFFFF - (key & 0xFFFFFF), mask=live)
    if ADVANCE:
        tl.store(pos_ptr + rows, tl.load(pos_ptr + rows, mask=live) + 1, mask=live)
        tl.store(seq_lens_ptr + rows, tl.load(seq_lens_ptr + rows, mask=live) + 1, mask=live)
