"""Launcher of the CUDA C++ one-pass short-context decode attention
(kernels/cuda/attention_direct.cu).

    if applies(qkv, k_cache, hq, bound):
        launch(qkv, q_norm, k_norm, cos, sin, positions, k_cache, v_cache, seq_lens, scale,
               eps, out, bound, pdl)

Same contract as kernels/attention.py's fused kernel with one program per (sequence, kv head)
(the packed qkv in, the new token's K/V appended at its position, out [B, Hq, D] written in
the dtype), for the shapes the CUDA kernel is written for: head_dim 128, two query heads per
kv head, bfloat16 or float16, a bound on seq_lens of at most 256 (a warp per 16 cache rows,
16 warps at most), on sm_90+ (programmatic dependent launch) with nvcc to build it
(ops/cuda_build.py). Elsewhere `applies` is False and the caller keeps the Triton kernels.

Why CUDA here: the warps of one program each walk their own 16 rows after the PDL wait and
meet once, through shared memory; Triton spreads a tile's rows over the warps and puts block
barriers in every reduction, so it splits the context over programs instead and pays a second
launch to merge them (docs/perf-log.md).
"""

from __future__ import annotations

import ctypes
import functools

import torch

from evokernel.ops import cuda_build

NAME = "attention_direct"
HEAD_DIM = 128
GROUP = 2
ROWS_PER_WARP = 16
MAX_BOUND = 256  # 16 warps
DTYPES = {torch.bfloat16: 0, torch.float16: 1}


@functools.cache
def library(device: torch.device) -> ctypes.CDLL | None:
    """The built library with its launcher's C signature declared, or None (once per device)."""
    lib = cuda_build.cuda_library(NAME, device)
    if lib is not None:
        fn = lib.evk_attention_direct
        fn.argtypes = [
            ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p,
        ]  # fmt: skip
        fn.restype = ctypes.c_int
        lib.evk_error_string.argtypes = [ctypes.c_int]
        lib.evk_error_string.restype = ctypes.c_char_p
    return lib


def applies(qkv: torch.Tensor, k_cache: torch.Tensor, hq: int, bound: int) -> bool:
    """Whether the CUDA kernel serves this call (shapes, dtype, bound, GPU, a built library)."""
    device = qkv.device
    if device.type != "cuda" or qkv.dtype not in DTYPES or not 1 <= bound <= MAX_BOUND:
        return False
    hkv, D = k_cache.shape[1], k_cache.shape[3]
    if D != HEAD_DIM or hq != GROUP * hkv or torch.cuda.get_device_capability(device) < (9, 0):
        return False
    return library(device) is not None


def launch(
    qkv: torch.Tensor, q_norm: torch.Tensor, k_norm: torch.Tensor, cos: torch.Tensor,
    sin: torch.Tensor, positions: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    seq_lens: torch.Tensor, scale: float, eps: float, out: torch.Tensor, bound: int, pdl: bool,
) -> None:  # fmt: skip
    """One launch over `bound` >= every seq_lens[b] (a host-side bound, as the Triton path's)."""
    lib = library(qkv.device)
    assert lib is not None, "the CUDA attention library is not available (check applies())"
    B, hkv, S = k_cache.shape[0], k_cache.shape[1], k_cache.shape[2]
    assert qkv.is_contiguous() and q_norm.is_contiguous() and k_norm.is_contiguous()
    assert cos.is_contiguous() and sin.is_contiguous() and cos.dtype == torch.float32
    assert positions.dtype == seq_lens.dtype == torch.int32 and out.is_contiguous()
    tensors = (qkv, q_norm, k_norm, cos, sin, positions, seq_lens, k_cache, v_cache, out)
    assert all(t.data_ptr() % 8 == 0 for t in tensors), "the CUDA attention needs 8-byte alignment"
    for cache in (k_cache, v_cache):
        assert cache.stride(3) == 1 and all(s % 4 == 0 for s in cache.stride()[:3])
    ptrs = (ctypes.c_void_p * 10)(*(t.data_ptr() for t in tensors))
    floats = (ctypes.c_float * 2)(scale, eps)
    index = qkv.device.index if qkv.device.index is not None else torch.cuda.current_device()
    warps = -(-min(bound, S) // ROWS_PER_WARP)
    ints = (ctypes.c_int * 6)(warps, hkv, S, cos.shape[0], B, index)
    strides = (ctypes.c_int64 * 9)(
        qkv.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1),
    )  # fmt: skip
    stream = torch.cuda.current_stream(qkv.device).cuda_stream
    err = lib.evk_attention_direct(DTYPES[qkv.dtype], int(pdl), ptrs, floats, ints, strides,
                                   ctypes.c_void_p(stream))  # fmt: skip
    if err != 0:
        raise RuntimeError(f"CUDA attention launch failed: {lib.evk_error_string(err).decode()}")
