"""Overlap between the decode step's kernels, shared by the decode kernels.

`pdl_enter(PDL)`: let the next kernel in the stream launch (griddepcontrol.launch_dependents),
then wait until the previous kernel has finished and its writes are visible
(griddepcontrol.wait). Everything a kernel does before this call may only read data no
earlier kernel of the step writes (weights, the KV cache of earlier steps); everything after
it is ordered as in a plain launch. A no-op when PDL is False (and under the interpreter).

`l2_prefetch(base_ptr, nbytes, piece, NT)`: pull `nbytes` bytes from `base_ptr` into L2
(sm_90's `cp.async.bulk.prefetch.L2`, fire and forget: no registers held, no result), so that
a later kernel's loads of them hit L2. The bytes are cut into `piece`-byte pieces (a multiple
of 16, as is `base_ptr`'s address), dealt round-robin over the launch's programs, one piece
per thread at most: the caller sizes `piece` so that programs x NT threads cover `nbytes`.
Only for data no kernel of the step writes (weights). A hint: it changes no result. CUDA
sm_90+ only; the interpreter cannot run it (callers pass a constexpr that is False there).
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
def l2_prefetch(base_ptr, nbytes, piece, NT: tl.constexpr):
    slot = tl.arange(0, NT).to(tl.int64) * tl.num_programs(0) + tl.program_id(0)
    start = slot * piece
    size = tl.minimum(tl.maximum(nbytes - start, 0), piece).to(tl.int32)
    ptrs = base_ptr.to(tl.pointer_type(tl.int8)) + start
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.gt.s32 p, $2, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r",
        [ptrs, size],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )
