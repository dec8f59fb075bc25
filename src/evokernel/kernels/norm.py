"""RMSNorm kernels: plain, and fused with the residual add that precedes it.

One program per row; the row (H elements, BLOCK_H = next power of two) is held in registers,
so each row is read once and written once: 2 * H * itemsize bytes (+ H for the add's second
input and its output). Rounding follows transformers' Qwen3: normalize in float32, round to
the output dtype, multiply by the weight, round again; the residual sum is rounded before it
is normalized.
"""

import triton
import triton.language as tl


@triton.jit
def _store_normed(x, w_ptr, out_row_ptr, cols, mask, H, eps):
    """out = round(x * rstd(x)) * w, as transformers rounds: x [BLOCK_H] float32, one row."""
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / H + eps)
    y = (x * rstd).to(out_row_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_row_ptr + cols, (y * w).to(out_row_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rms_norm_kernel(
    x_ptr,  # [N, H]
    w_ptr,  # [H]
    out_ptr,  # [N, H]
    stride_x,
    stride_out,
    H,
    eps,
    BLOCK_H: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    _store_normed(x, w_ptr, out_ptr + row * stride_out, cols, mask, H, eps)


@triton.jit
def add_rms_norm_kernel(
    x_ptr,  # [N, H] the branch output
    res_ptr,  # [N, H] the residual stream
    w_ptr,  # [H]
    sum_ptr,  # [N, H] out: res + x
    out_ptr,  # [N, H] out: rms_norm(res + x)
    stride_x,
    stride_res,
    stride_sum,
    stride_out,
    H,
    eps,
    BLOCK_H: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0).to(tl.float32)
    h = (r + x).to(sum_ptr.dtype.element_ty)
    tl.store(sum_ptr + row * stride_sum + cols, h, mask=mask)
    _store_normed(h.to(tl.float32), w_ptr, out_ptr + row * stride_out, cols, mask, H, eps)
