"""Overlap helpers shared by the decode kernels: programmatic dependent launch and L2 prefetch.

`pdl_enter(PDL)`: let the next kernel in the stream launch (griddepcontrol.launch_dependents),
then wait until the previous kernel has finished and its writes are visible
(griddepcontrol.wait). Everything a kernel does before this call may only read data no
earlier kernel of the step writes (weights, the KV cache of earlier steps); everything after
it is ordered as in a plain launch. A no-op when PDL is False (and under the interpreter).

`prefetch_l2(ptr, elems, PREFETCH)`: this program's share of the tensor range
[ptr, ptr + elems) is pulled into L2 with sm_90's bulk prefetch (cp.async.bulk.prefetch,
issued by one thread per program, asynchronous, no registers held): weights that a later
kernel of the step reads, fetched while this kernel's own work is latency-bound. Changes no
result; the range is split evenly over every program of the grid, in 64-element pieces.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def pdl_enter(PDL: tl.constexpr):
    if PDL:
        gdc_launch_dependents()
        gdc_wait()


@triton.jit
def prefetch_l2(ptr, elems, PREFETCH: tl.constexpr):
    if PREFETCH:
        pid = tl.program_id(0) + tl.program_id(1) * tl.num_programs(0)
        programs = tl.num_programs(0) * tl.num_programs(1)
        share = tl.cdiv(tl.cdiv(elems, programs), 64) * 64
        start = pid * share
        end = tl.minimum(start + share, elems)
        itemsize = ptr.dtype.element_ty.primitive_bitwidth // 8
        for off in range(start, end, 32768):  # 32K elements per instruction
            nbytes = (tl.minimum(off + 32768, end) - off) * itemsize
            tl.inline_asm_elementwise(
                "{ .reg .pred p; .reg .u32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; "
                "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
                "=r,l,r",
                [(ptr + off).to(tl.int64, bitcast=True), nbytes],
                dtype=tl.int32,
                is_pure=False,
                pack=1,
            )
