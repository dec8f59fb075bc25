"""Probe kernels for what a dependency between decode stages costs (bench/sync_costs.py).

Every decode GEMV needs the whole input vector its predecessor wrote, so a decode step is a
chain of grid-wide dependencies. These kernels do the least work such a dependency allows,
so that timing them isolates its price:

  chain_kernel     one stage as its own launch: program p reads all N values of `src`
                   (written by the previous launch), reduces them, and writes its BLOCK
                   slice of `dst` = src + 1 (+1 more if the sum is NaN, which it never is:
                   the reduction cannot be dropped). With PDL the launch overlaps its
                   predecessor and waits (gdc_wait) before reading.
  barrier_kernel   the same stages inside one persistent launch (grid <= SMs, all resident):
                   after each stage every program stores its slice, then takes part in a
                   grid barrier (block barrier, release add on a counter, acquire spin until
                   all programs of the stage have arrived), and the next stage reads through
                   L2. Never run it with more programs than can be resident at once, nor
                   under the interpreter (programs run one by one there: the spin never ends).
  atomic_add_kernel  program p adds an N-vector of ones into `acc` (float32 atomics, relaxed):
                   the cross-program sum a split-K or fused-MLP kernel needs.
  store_rows_kernel  program p stores an N-vector of ones into row p of `out`: the same bytes
                   without atomics.

All data is float32; every launcher checks its result (the bench refuses to time a wrong one).
"""

import triton
import triton.language as tl

from evokernel.kernels.overlap import pdl_enter


@triton.jit
def _stage(
    src_ptr, dst_ptr, N, pid, BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, CACHE: tl.constexpr
):  # fmt: skip
    """dst[pid*BLOCK : +BLOCK] = src[same] + 1 (+1 if sum(src[:N]) is NaN). CACHE: the loads'
    cache modifier ("" or ".cg", through L2)."""
    offs = tl.arange(0, BLOCK_N)
    x = tl.load(src_ptr + offs, mask=offs < N, other=0.0, cache_modifier=CACHE)
    total = tl.sum(x, axis=0)
    mine = pid * BLOCK + tl.arange(0, BLOCK)
    own = tl.load(src_ptr + mine, mask=mine < N, other=0.0, cache_modifier=CACHE)
    bump = tl.where(total != total, 2.0, 1.0)
    tl.store(dst_ptr + mine, own + bump, mask=mine < N)


@triton.jit
def chain_kernel(
    src_ptr, dst_ptr, N, BLOCK: tl.constexpr, BLOCK_N: tl.constexpr, PDL: tl.constexpr
):  # fmt: skip
    pdl_enter(PDL)
    _stage(src_ptr, dst_ptr, N, tl.program_id(0), BLOCK, BLOCK_N, "")


@triton.jit
def barrier_kernel(
    a_ptr, b_ptr, counter_ptr, N, STAGES, BLOCK: tl.constexpr, BLOCK_N: tl.constexpr
):  # fmt: skip
    """STAGES stages a -> b -> a ...; counter must be 0 at launch (it ends at STAGES * P)."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    for stage in range(STAGES):
        if stage % 2 == 0:
            _stage(a_ptr, b_ptr, N, pid, BLOCK, BLOCK_N, ".cg")
        else:
            _stage(b_ptr, a_ptr, N, pid, BLOCK, BLOCK_N, ".cg")
        tl.debug_barrier()  # every thread's stores issued before the arrival
        tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")
        target = (stage + 1) * programs
        seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
        while seen < target:
            seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()


@triton.jit
def atomic_add_kernel(acc_ptr, N, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    ones = tl.full([BLOCK_N], 1.0, tl.float32)
    tl.atomic_add(acc_ptr + offs, ones, mask=offs < N, sem="relaxed", scope="gpu")


@triton.jit
def store_rows_kernel(out_ptr, N, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    row = out_ptr + tl.program_id(0).to(tl.int64) * N
    tl.store(row + offs, tl.full([BLOCK_N], 1.0, tl.float32), mask=offs < N)
