"""SiLU-and-multiply: out = silu(gate) * up, reading the packed gate_up projection.

gate_up [N, 2I] (gate in columns 0..I-1, up in I..2I-1) -> out [N, I]. Grid (N, cdiv(I, BLOCK)).
Bytes: 3 * N * I * itemsize. Rounding follows transformers: silu rounded to the dtype, then
the product rounded.
"""

import triton
import triton.language as tl


@triton.jit
def silu_mul_kernel(
    gu_ptr,  # [N, 2I]
    out_ptr,  # [N, I]
    stride_gu,
    stride_out,
    I,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < I
    g = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * stride_gu + I + cols, mask=mask, other=0.0).to(tl.float32)
    s = (g / (1.0 + tl.exp(-g))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (s * u).to(out_ptr.dtype.element_ty), mask=mask)
