"""Launchers of the CUDA C++ shared-memory GEMVs (kernels/cuda/gemv_smem.cu).

    if gate_up_applies(x, gate_up):
        act = norm_gate_up(x, norm_weight, gate_up, eps, pdl)

Same results as ops/decode.py's `norm_gate_up_silu` (transformers' rounding), for the shapes
the kernel is written for: K a multiple of 256 and at most 1024, bfloat16 or float16, rows of
the weight 16-byte aligned, on sm_90+ (bulk copies, programmatic dependent launch) with nvcc
to build it. Elsewhere `gate_up_applies` is False and the caller keeps the Triton kernel.
"""

from __future__ import annotations

import ctypes

import torch

from evokernel.ops import cuda_build

NAME = "gemv_smem"
MAX_K = 1024
DTYPES = {torch.bfloat16: 0, torch.float16: 1}
_TYPED: set[int] = set()


def library(device: torch.device) -> ctypes.CDLL | None:
    lib = cuda_build.cuda_library(NAME, device)
    if lib is not None and id(lib) not in _TYPED:
        lib.evk_norm_gate_up.argtypes = [
            ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int64), ctypes.c_float,
            ctypes.c_void_p,
        ]  # fmt: skip
        lib.evk_norm_gate_up.restype = ctypes.c_int
        lib.evk_error_string.argtypes = [ctypes.c_int]
        lib.evk_error_string.restype = ctypes.c_char_p
        _TYPED.add(id(lib))
    return lib


def gate_up_applies(x: torch.Tensor, gate_up: torch.Tensor) -> bool:
    device = x.device
    if device.type != "cuda" or x.dtype not in DTYPES:
        return False
    K = gate_up.shape[1]
    if K % 256 or K > MAX_K or gate_up.stride(0) * gate_up.element_size() % 16:
        return False
    if gate_up.data_ptr() % 16 or torch.cuda.get_device_capability(device) < (9, 0):
        return False
    return library(device) is not None


def norm_gate_up(
    x: torch.Tensor, norm_weight: torch.Tensor, gate_up: torch.Tensor, eps: float, pdl: bool
) -> torch.Tensor:
    lib = library(x.device)
    assert lib is not None, "the CUDA GEMV library is not available (check gate_up_applies())"
    two_i, K = gate_up.shape
    M, inter = x.shape[0], two_i // 2
    assert x.stride(1) == 1 and norm_weight.is_contiguous() and gate_up.stride(1) == 1
    act = torch.empty((M, inter), device=x.device, dtype=x.dtype)
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    ptrs = (ctypes.c_void_p * 4)(x.data_ptr(), norm_weight.data_ptr(), gate_up.data_ptr(),
                                 act.data_ptr())  # fmt: skip
    ints = (ctypes.c_int * 4)(M, inter, K, index)
    strides = (ctypes.c_int64 * 3)(x.stride(0), gate_up.stride(0), act.stride(0))
    stream = torch.cuda.current_stream(x.device).cuda_stream
    err = lib.evk_norm_gate_up(DTYPES[x.dtype], int(pdl), ptrs, ints, strides, eps,
                               ctypes.c_void_p(stream))  # fmt: skip
    if err != 0:
        raise RuntimeError(f"CUDA gate_up launch failed: {lib.evk_error_string(err).decode()}")
    return act
