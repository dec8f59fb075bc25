"""Launcher of the CUDA C++ batched decode GEMV on tensor cores (kernels/cuda/rows_mma.cu), for
1..32 activation rows on dense bfloat16 / float16 weights.

    if applies(x, weight, norm_weight):
        launch(OP_LINEAR, x, weight, out, norm_weight=n, eps=eps, bias=b, pdl=True)

Same results as ops/layer.py's launchers (the one-row kernels of kernels/gemv.py and the rows
kernels of kernels/rows.py) up to float32 summation order, with the same rounding but the
norm's: the products take round(x * norm_w) and each row's rstd scales their float32 sums
(one rounding where transformers, and the Triton kernels, round twice: round(round(x * rstd)
* norm_w)), so the norm takes no pass over the activations of its own:
  OP_LINEAR    out [M, N] = round(W @ rms_norm?(x) + bias?)     (norm_linear)
  OP_RESIDUAL  out [M, N] += round(W @ x), in place              (linear_residual)
  OP_GATE_UP   out [M, I] = silu(round(Wg @ n)) * round(Wu @ n)  (norm_gate_up_silu)
  OP_HEAD      out [M, V] = round(W @ rms_norm(x)) as float32, if given; each row's argmax key
               (kernels/gemv.py `argmax_key`) atomically maxed into keys[row], if given

For the shapes it is written for: K a multiple of 128 with at most `MAX_WARPS` x 4 chunks of
128 (K <= 8,192), x's rows, the weight's rows and the norm weight 16-byte aligned, bfloat16
or float16, on sm_90+ with nvcc to build it (ops/cuda_build.py). Elsewhere `applies` is False
and the caller keeps the Triton kernels.

Why CUDA: at a few rows a step still reads every weight once, so the kernel should cost what
the one-row kernel costs. Triton's dot takes its operands through shared memory in its own
layouts, so a weight slab loaded before the PDL wait is converted after it. Here each lane
loads its weights straight into the MMA's operand registers (the MMA's K order is a
permutation of the chunk's values, the same for both operands), before the wait, and the
activations after it from L1, normalised in registers: no shared memory on the operands' way.

Where it pays (one H200, docs/perf-log.md): the residual ops (one round trip after the wait)
15-25% faster than the Triton rows kernels from 4 to 16 rows, so the engine runs o_proj and
down on it from 3 to 16 rows (`DecodeTuning.cuda_rows_*`); qkv too (its norm in the epilogue:
4.1 against 4.5 us a layer at 8 rows, 5.4 against 7.3 at 16), gate_up from 9 rows (slower at
8: its 384 CTAs of 8 warps, three an SM). The head (thousands of CTAs) measured 1.3-2x slower
than the Triton kernel (`cuda_rows_head`: off by default); at one and two rows the one-row
kernels are faster, and at 32 rows down is slower.

Work split (`plan`): a CTA owns `tiles` tiles of 8 weight rows over the whole K (gate_up: 8
gate rows and their 8 up rows), its warps splitting K by chunks of 128 (at most `cmax` a warp:
1, 2 or 4), so that the CTAs' weights (16-32 KB each) are in flight at once.
"""

from __future__ import annotations

import ctypes
import functools
from typing import NamedTuple

import torch

from evokernel.ops import cuda_build
from evokernel.ops.grid import cdiv

NAME = "rows_mma"
OP_LINEAR, OP_RESIDUAL, OP_GATE_UP, OP_HEAD = 0, 1, 2, 3
F_NORM, F_BIAS, F_LOGITS, F_KEYS = 1, 2, 16, 32
CHUNK = 128  # values of a row one warp's item covers: K is a multiple of it
MAX_WARPS = 16  # a CTA's warps at most (kernels/cuda/rows_mma.cu MAX_WARPS)
MAX_ROWS = 32  # activation rows a launch takes (two row tiles of 16)
TILE = 8  # weight rows of a tile (an MMA's N)
BUILT = {1: (1, 2, 4), 2: (1, 2)}  # tiles a CTA -> chunks a warp at most, as compiled
MAX_CHUNKS = max(BUILT[1])  # chunks a warp the widest build takes
TWO_TILE_WARPS = 8  # two tiles a CTA: at most this many warps (their launch bounds)
# The engine's calls take at most 2 chunks a warp (K <= 4,096), the shapes measured; 4 chunks a
# warp (to K 8,192) spill registers and were not timed.
ENGINE_MAX_CHUNKS = 2
DTYPES = {torch.bfloat16: 0, torch.float16: 1}


class Plan(NamedTuple):
    warps: int  # a CTA's warps (<= K / 128)
    tiles: int  # tiles of 8 weight rows a CTA (gate_up: 2, a gate and an up tile)
    cmax: int  # chunks of 128 a warp at most (as compiled: `BUILT`)


def plan(op: int, N: int, K: int, sms: int, warps: int = 0) -> Plan | None:
    """How a launch of `op` over a weight [N, K] splits (or None where the kernel is not
    written for it). Warps: `warps`, or as many as make a warp's chunks fewest (at most 16),
    spread evenly; two tiles a CTA where each warp has one chunk and the CTAs still fill
    the SMs (gate_up always two: a gate and an up tile)."""
    if K % CHUNK or K < CHUNK or N < 1:
        return None
    chunks = K // CHUNK
    if warps:
        warps = min(warps, chunks, MAX_WARPS)
    else:
        warps = cdiv(chunks, cdiv(chunks, MAX_WARPS))
    per = cdiv(chunks, warps)
    if op == OP_GATE_UP:
        tiles = 2
    else:
        tiles = 2 if per == 1 and cdiv(N, 2 * TILE) >= sms else 1
    if tiles == 2 and warps > TWO_TILE_WARPS:  # built for 8 warps at most
        warps = TWO_TILE_WARPS
        per = cdiv(chunks, warps)
    fits = [c for c in BUILT[tiles] if c >= per]
    if not fits:
        return None
    return Plan(warps, tiles, fits[0])


def library(device: torch.device) -> ctypes.CDLL | None:
    """The built library with its launcher's C signature declared, or None (once per device)."""
    return cuda_build.launcher_library(NAME, "evk_rows_mma", device)


@functools.cache
def _sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _aligned_rows(t: torch.Tensor) -> bool:
    """Every row of a 2-D tensor starts 16-byte aligned and is contiguous."""
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and (t.dim() == 1 or t.stride(0) % 8 == 0)


def applies(
    x: torch.Tensor, weight: object, norm_weight: torch.Tensor | None = None,
    op: int = OP_LINEAR, warps: int = 0, most: int = MAX_CHUNKS,
) -> bool:  # fmt: skip
    """Whether the CUDA kernel serves this call: 1..MAX_ROWS rows of x in bfloat16 or float16
    on an sm_90+ device, a dense weight of the same dtype whose shape `plan` takes (with
    `warps`, and at most `most` chunks a warp), x's rows, the weight's rows and the norm
    weight (if any) 16-byte aligned, a built library."""
    if not isinstance(weight, torch.Tensor) or x.device.type != "cuda" or x.dim() != 2:
        return False
    if not 1 <= x.shape[0] <= MAX_ROWS or x.dtype not in DTYPES or weight.dtype != x.dtype:
        return False
    if weight.dim() != 2 or weight.shape[1] != x.shape[1] or weight.device != x.device:
        return False
    if not (_aligned_rows(x) and _aligned_rows(weight)):
        return False
    if norm_weight is not None and not _aligned_rows(norm_weight):
        return False
    if torch.cuda.get_device_capability(x.device) < (9, 0):
        return False
    N, K = weight.shape
    split = plan(op, N // 2 if op == OP_GATE_UP else N, K, _sms(x.device), warps)
    if split is None or split.cmax > most:
        return False
    return library(x.device) is not None


def launch(
    op: int, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None, *,
    norm_weight: torch.Tensor | None = None, eps: float = 0.0, bias: torch.Tensor | None = None,
    keys: torch.Tensor | None = None, pdl: bool = True, warps: int = 0,
) -> None:  # fmt: skip
    """One launch (`applies` must hold): x [M, K]; out [M, N] in the dtype (OP_RESIDUAL: the
    residual, updated in place; OP_GATE_UP: [M, N / 2]; OP_HEAD: float32 logits or None, with
    `keys` int64 [>= M] holding zeros or earlier keys, or None)."""
    lib = library(x.device)
    assert lib is not None, "the CUDA rows GEMV library is not available (check applies())"
    M, K = x.shape
    N = weight.shape[0]
    n_out = N // 2 if op == OP_GATE_UP else N
    assert op != OP_GATE_UP or N % 2 == 0, "gate_up stacks gate and up rows"
    split = plan(op, n_out, K, _sms(x.device), warps)
    assert split is not None, (op, N, K)
    flags = 0
    if op == OP_HEAD:
        assert out is not None or keys is not None, "the head writes logits, keys or both"
        assert N < 1 << 24, "argmax keys hold rows below 2**24"
        if out is not None:
            assert out.shape == (M, N) and out.dtype == torch.float32 and out.stride(1) == 1
            flags |= F_LOGITS
        if keys is not None:
            assert keys.dtype == torch.int64 and keys.numel() >= M and keys.is_contiguous()
            flags |= F_KEYS
    else:
        assert out is not None and keys is None
        assert out.shape == (M, n_out) and out.dtype == x.dtype and out.stride(1) == 1
    if norm_weight is not None:
        assert norm_weight.shape == (K,) and _aligned_rows(norm_weight)
        flags |= F_NORM
    if bias is not None:
        assert op == OP_LINEAR and bias.shape == (N,) and bias.is_contiguous()
        flags |= F_BIAS
    ptrs = (ctypes.c_void_p * 6)(
        x.data_ptr(), (norm_weight if norm_weight is not None else x).data_ptr(),
        (bias if bias is not None else x).data_ptr(), weight.data_ptr(),
        (out if out is not None else x).data_ptr(), (keys if keys is not None else x).data_ptr(),
    )  # fmt: skip
    floats = (ctypes.c_float * 1)(eps)
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    ints = (ctypes.c_int * 10)(
        op, M, N, n_out, K, flags, split.warps, split.tiles, split.cmax, index
    )
    strides = (ctypes.c_int64 * 3)(
        x.stride(0), weight.stride(0), out.stride(0) if out is not None else 0
    )
    stream = torch.cuda.current_stream(x.device).cuda_stream
    err = lib.evk_rows_mma(DTYPES[x.dtype], int(pdl), ptrs, floats, ints, strides,
                           ctypes.c_void_p(stream))  # fmt: skip
    if err != 0:
        raise RuntimeError(f"CUDA rows GEMV launch failed: {lib.evk_error_string(err).decode()}")
