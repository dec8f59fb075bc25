"""Embedding gather: out[r, :] = weight[ids[r], :].

Grid (N,): program r copies one row of H elements (BLOCK_H = next power of two >= H). An id
outside [0, V) reads nothing and writes a zero row (torch would raise on the device; a kernel
must not read out of bounds). Bytes: 2 * N * H * itemsize plus the ids.

With PDL=True it first lets the next kernel launch, then waits on the previous one (the ids
may be its output): in a decode step the first projection starts loading its weights while
this gather runs (kernels/overlap.py).
"""

import triton
import triton.language as tl

from evokernel.kernels.overlap import pdl_enter


@triton.jit
def embed_kernel(
    ids_ptr,  # [N] int32 or int64
    w_ptr,  # [V, H]
    out_ptr,  # [N, H]
    V,
    H,
    stride_w,
    stride_out,
    BLOCK_H: tl.constexpr,
    PDL: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_H)
    pdl_enter(PDL)
    idx = tl.load(ids_ptr + row).to(tl.int64)
    valid = (idx >= 0) & (idx < V)
    src = w_ptr + tl.where(valid, idx, 0) * stride_w + cols
    x = tl.load(src, mask=(cols < H) & valid, other=0.0)
    tl.store(out_ptr + row.to(tl.int64) * stride_out + cols, x, mask=cols < H)
