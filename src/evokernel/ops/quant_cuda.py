"""Launcher of the CUDA C++ 4-bit decode GEMV (kernels/cuda/int4_gemv.cu), for one activation row.

    if applies(x, weight):
        launch(OP_LINEAR, x, weight, out, norm_weight=n, eps=eps, bias=b, pdl=True)

Same results as kernels/quant_gemv.py's fused kernels (ops/quant.py's signatures, one row):
  OP_LINEAR    out [1, N] = round(W @ rms_norm?(x) + bias?)     (norm_linear, linear)
  OP_RESIDUAL  out [1, N] += round(W @ x), in place              (linear_residual)
  OP_GATE_UP   out [1, I] = silu(round(Wg @ n)) * round(Wu @ n)  (norm_gate_up_silu)
  OP_HEAD      out [1, V] = W @ rms_norm(x) in float32, if given; the row's argmax key
               (kernels/gemv.py `argmax_key`) atomically maxed into keys[0], if given
               (norm_logits, head_keys: the head, up to 8 warps a CTA)

For the shapes it is written for: an `Int4Weight` whose K is a multiple of 128 and group size
128 times a power of two (or one group a row),
whose act-order permutation (if any) the launcher of ops/quant.py gathers first (`Layout.stored`),
one bfloat16 or float16 row, 16-byte aligned, on sm_90+ with nvcc to build it
(ops/cuda_build.py). Elsewhere `applies` is False and the caller keeps the Triton kernels.

Why CUDA: a streaming GEMV wants every SM to keep many 16-byte loads in flight and to spend
few instructions a packed value: here a mask-and-or turns two nibbles into a pair of the model
dtype (128 + q in bfloat16's mantissa, exact) and the tensor cores take the products (an
mma.m16n8k16 a 16 x 16 tile), about half an instruction a value, with the activations staged
once per CTA in the MMAs' k order. The Triton kernels hold a program's whole tile in registers
and spend 3-4 CUDA-core instructions a value: 22-44% of the 4-bit byte floor at Qwen3-8B's
shapes; a CUDA-core version of this kernel (3 instructions a value) measured no better
(docs/perf-log.md).

Launch settings (`Launch`): warps a CTA (they split each group of 16 rows' K and meet at a
block barrier), the pipeline depth (items of loads held in registers a warp: 2 or 3; up to 8
warps a CTA take 85 registers a thread, 3 CTAs an SM; 9-16 warps 64 registers, 2 CTAs an SM
and depth 2, as deeper spills) and CTAs an SM (0: as many as fit). The grid is persistent: at
most as many CTAs as fit on the GPU at once, each staging the activation row once.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import torch

from evokernel.model.quant.packed import Int4Weight
from evokernel.ops import cuda_build

NAME = "int4_gemv"
OP_LINEAR, OP_RESIDUAL, OP_GATE_UP, OP_HEAD = 0, 1, 2, 3
HEAD_MAX_WARPS = 8  # the head's kernel is built for CTAs of up to 8 warps
CHUNK = 128  # values of a row one MMA item covers: K and the group size are multiples of it
DTYPES = {torch.bfloat16: 0, torch.float16: 1}
SCALE_CODES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
F_NORM, F_BIAS, F_ZEROS, F_LOGITS, F_KEYS = 1, 2, 4, 16, 32


MAX_WARPS = 16  # a CTA's warps at most (kernels/cuda/int4_gemv.cu MAX_WARPS)


class Launch(NamedTuple):
    warps: int = 8  # a CTA's warps (1..MAX_WARPS; at most K / 128)
    pipe: int = 3  # items of loads in flight a warp (2 or 3)
    ctas: int = 0  # CTAs an SM (0: as many as fit)


DEFAULT_LAUNCH = Launch()


def library(device: torch.device) -> ctypes.CDLL | None:
    """The built library with its launcher's C signature declared, or None (once per device)."""
    return cuda_build.launcher_library(NAME, "evk_int4_gemv", device)


def shape_fits(weight: object) -> bool:
    """Whether the kernel is written for this weight's layout (host-side facts only)."""
    if not isinstance(weight, Int4Weight):
        return False
    _N, K = weight.shape
    chunks = weight.group_size // CHUNK  # a group's chunks: a power of two, or one group a row
    return (
        K % CHUNK == 0
        and weight.group_size % CHUNK == 0
        and (weight.groups == 1 or chunks & (chunks - 1) == 0)
        and weight.scales.dtype in SCALE_CODES
    )


def applies(x: torch.Tensor, weight: object, norm_weight: torch.Tensor | None = None) -> bool:
    """Whether the CUDA kernel serves this call: one row of a supported dtype on an sm_90+
    device, a weight `shape_fits`, the row, the packed weight and the norm weight (if any)
    contiguous and 16-byte aligned (they are read 16 bytes at a time), a built library."""
    if x.device.type != "cuda" or x.dim() != 2 or x.shape[0] != 1 or x.dtype not in DTYPES:
        return False
    if x.stride(1) != 1:
        return False
    if not shape_fits(weight) or torch.cuda.get_device_capability(x.device) < (9, 0):
        return False
    assert isinstance(weight, Int4Weight)
    if weight.qweight.data_ptr() % 16 or x.data_ptr() % 16 or not weight.qweight.is_contiguous():
        return False
    if norm_weight is not None and (norm_weight.data_ptr() % 16 or not norm_weight.is_contiguous()):
        return False
    return library(x.device) is not None


def launch(
    op: int, x: torch.Tensor, weight: Int4Weight, out: torch.Tensor | None, *,
    norm_weight: torch.Tensor | None = None, eps: float = 0.0, bias: torch.Tensor | None = None,
    keys: torch.Tensor | None = None, pdl: bool = True, settings: Launch = DEFAULT_LAUNCH,
) -> None:  # fmt: skip
    """One launch (`applies` must hold): x [1, K] (in the weight's stored column order), out
    [1, N] (OP_RESIDUAL: the residual, updated in place; OP_GATE_UP: [1, N / 2]; OP_HEAD:
    float32 logits or None, with `keys` int64 [>= 1] holding zero or an earlier key, or None)."""
    lib = library(x.device)
    assert lib is not None, "the CUDA 4-bit GEMV library is not available (check applies())"
    N, K = weight.shape
    n_out = N // 2 if op == OP_GATE_UP else N
    flags = 0
    if op == OP_HEAD:
        assert out is not None or keys is not None, "the head writes logits, keys or both"
        assert settings.warps <= HEAD_MAX_WARPS, settings
        assert N < 1 << 24, "argmax keys hold rows below 2**24"
        if out is not None:
            assert out.shape == (1, N) and out.dtype == torch.float32 and out.is_contiguous()
            flags |= F_LOGITS
        if keys is not None:
            assert keys.dtype == torch.int64 and keys.numel() >= 1 and keys.is_contiguous()
            flags |= F_KEYS
    else:
        assert out is not None and keys is None
        assert out.shape == (1, n_out) and out.dtype == x.dtype and out.is_contiguous()
    if norm_weight is not None:
        assert norm_weight.shape == (K,) and norm_weight.is_contiguous()
        assert norm_weight.data_ptr() % 16 == 0
        flags |= F_NORM
    if bias is not None:
        assert bias.shape == (N,) and bias.is_contiguous()
        flags |= F_BIAS
    scales = weight.scales
    zeros = weight.zeros
    assert scales.is_contiguous() and (zeros is None or zeros.is_contiguous())
    if zeros is not None:
        flags |= F_ZEROS
    ptrs = (ctypes.c_void_p * 8)(
        x.data_ptr(), (norm_weight if norm_weight is not None else x).data_ptr(),
        (bias if bias is not None else x).data_ptr(), weight.qweight.data_ptr(),
        scales.data_ptr(), (zeros if zeros is not None else scales).data_ptr(),
        (out if out is not None else x).data_ptr(), (keys if keys is not None else x).data_ptr(),
    )  # fmt: skip
    floats = (ctypes.c_float * 1)(eps)
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    ints = (ctypes.c_int * 13)(
        op, N, n_out, K, weight.groups,
        31 if weight.groups == 1 else (weight.group_size // CHUNK).bit_length() - 1,
        SCALE_CODES[scales.dtype], weight.zero_offset, flags, settings.warps, settings.pipe,
        settings.ctas, index,
    )  # fmt: skip
    strides = (ctypes.c_int64 * 1)(0)
    stream = torch.cuda.current_stream(x.device).cuda_stream
    err = lib.evk_int4_gemv(DTYPES[x.dtype], int(pdl), ptrs, floats, ints, strides,
                            ctypes.c_void_p(stream))  # fmt: skip
    if err != 0:
        raise RuntimeError(f"CUDA 4-bit GEMV launch failed: {lib.evk_error_string(err).decode()}")
