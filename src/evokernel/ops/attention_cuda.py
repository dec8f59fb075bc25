"""Launcher of the CUDA C++ one-pass decode attention for short and mid contexts (bounds up to
2,048, or 4,096 with two tiles a warp; kernels/cuda/attention_direct.cu).

    split = split_for(qkv, k_cache, hq, bound, max_bound, min_cluster)  # or applies(...)
    if split is not None:
        launch(qkv, q_norm, k_norm, cos, sin, positions, k_cache, v_cache, seq_lens, scale,
               eps, out, pdl, split)

Same contract as kernels/attention.py's fused kernel with one program per (sequence, kv head)
(the packed qkv in, the new token's K/V appended at its position, out [B, Hq, D] written in
the dtype), for the shapes the CUDA kernel is written for: head_dim 128, two or four query
heads per kv head (`GROUPS`: Qwen3-0.6B; Qwen3-4B/8B, Llama-3-8B), bfloat16 or float16, a
bound on seq_lens of at most `max_bound` and 2,048, on sm_90+ (programmatic dependent
launch, clusters) with nvcc to build it (ops/cuda_build.py).

Work split (`plan`): a warp per 16 cache rows. Up to 256 rows one CTA per (sequence, kv head)
(16 warps at most); beyond, a cluster of max(`min_cluster`, cdiv(rows, 256)) <= 8 CTAs per
kv head, merged through distributed shared memory, and only while the grid takes at most half
the SMs (B * Hkv * cluster CTAs; measured on an H100 at Qwen3-0.6B's 8 kv heads: at batch 1,
64 CTAs, 4-11% faster steps than the split Triton kernel; at batch 4, 128 CTAs, 10% slower at
bound 1,024; on an H200 at batch 8 and 16, grids of 128 to 512 CTAs took 1.4-2x the Triton
split's time at bounds 512 and 1,024). With `two_tiles`, wherever that rule leaves the call to
Triton, and from `tiles_from` rows if set, a warp takes two tiles of 16 rows, its second staged
in shared memory before the PDL wait (8 KB a warp), so a CTA covers 512 rows and a cluster of
cdiv(rows, 512) <= 8 CTAs 4,096 (`min_cluster` does not apply; a single CTA is not held to the
half-SMs rule). Measured on an H200 (docs/perf-log.md): at 4-16 rows and bounds to 512 (one
CTA a head) 5-10% faster steps than the Triton split; at batch 1, where the second tiles hold
live rows, slower than the one-tile clusters and than Triton past 2,048, so `tiles_from` is
off. Elsewhere `applies` is False and the caller keeps the Triton kernels.

Why CUDA here: the warps of one program each walk their own 16 rows after the PDL wait and
meet once, through shared memory; Triton spreads a tile's rows over the warps and puts block
barriers in every reduction, so it splits the context over programs instead and pays a second
launch to merge them (docs/perf-log.md).
"""

from __future__ import annotations

import ctypes
import functools
from typing import NamedTuple

import torch

from evokernel.ops import cuda_build

NAME = "attention_direct"
HEAD_DIM = 128
GROUPS = (2, 4)  # query heads per kv head the kernel is compiled for
ROWS_PER_WARP = 16
MAX_WARPS = 16
MAX_CLUSTER = 8  # the portable cluster size
MAX_TILES = 2  # tiles of 16 rows a warp, the second staged in shared memory
ONE_TILE_BOUND = ROWS_PER_WARP * MAX_WARPS * MAX_CLUSTER  # 2,048 positions with one tile a warp
MAX_BOUND = ONE_TILE_BOUND * MAX_TILES  # 4,096 with two
DTYPES = {torch.bfloat16: 0, torch.float16: 1}


class Split(NamedTuple):
    warps: int  # a CTA's warps (<= 16)
    cluster: int  # CTAs per (sequence, kv head), 1..8
    tiles: int  # tiles of 16 rows a warp, 1 or 2


def library(device: torch.device) -> ctypes.CDLL | None:
    """The built library with its launcher's C signature declared, or None (once per device)."""
    return cuda_build.launcher_library(NAME, "evk_attention_direct", device)


def plan(
    batch: int, hkv: int, rows: int, min_cluster: int, sms: int, two_tiles: bool = False,
    tiles_from: int = 0,
) -> Split | None:  # fmt: skip
    """The work split for `rows` cache rows of `batch` x `hkv` heads, or None where the rules
    above leave the call to the Triton kernels: two tiles a warp where `two_tiles` and the
    one-tile clusters do not fit, or from `tiles_from` rows (0: never)."""
    if not 1 <= rows <= MAX_BOUND:
        return None
    one = _one_tile(batch, hkv, rows, min_cluster, sms)
    if (two_tiles and one is None) or (tiles_from and rows >= tiles_from):
        cluster = -(-rows // (ROWS_PER_WARP * MAX_WARPS * MAX_TILES))
        if cluster <= MAX_CLUSTER and (cluster == 1 or 2 * batch * hkv * cluster <= sms):
            return Split(-(-rows // (ROWS_PER_WARP * MAX_TILES * cluster)), cluster, MAX_TILES)
    return one


def _one_tile(batch: int, hkv: int, rows: int, min_cluster: int, sms: int) -> Split | None:
    if rows > ONE_TILE_BOUND:
        return None
    cluster = 1
    if rows > ROWS_PER_WARP * MAX_WARPS:
        per_cta = ROWS_PER_WARP * MAX_WARPS
        cluster = min(MAX_CLUSTER, max(min_cluster, -(-rows // per_cta)))
        if 2 * batch * hkv * cluster > sms:
            return None
    return Split(-(-rows // (ROWS_PER_WARP * cluster)), cluster, 1)


@functools.cache
def _sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def split_for(
    qkv: torch.Tensor, k_cache: torch.Tensor, hq: int, bound: int, max_bound: int = 256,
    min_cluster: int = 4, two_tiles: bool = False, tiles_from: int = 0,
) -> Split | None:  # fmt: skip
    """`plan`'s split where the CUDA kernel serves this call (shapes, dtype, bound up to
    `max_bound`, the work split, GPU, a built library), else None."""
    device = qkv.device
    if device.type != "cuda" or qkv.dtype not in DTYPES or not 1 <= bound <= max_bound:
        return None
    hkv, D = k_cache.shape[1], k_cache.shape[3]
    if D != HEAD_DIM or hq not in {g * hkv for g in GROUPS}:
        return None
    if torch.cuda.get_device_capability(device) < (9, 0):
        return None
    rows = min(bound, k_cache.shape[2])
    split = plan(qkv.shape[0], hkv, rows, min_cluster, _sms(device), two_tiles, tiles_from)
    return split if library(device) is not None else None


def applies(
    qkv: torch.Tensor, k_cache: torch.Tensor, hq: int, bound: int, max_bound: int = 256,
    min_cluster: int = 4, two_tiles: bool = False, tiles_from: int = 0,
) -> bool:  # fmt: skip
    """Whether the CUDA kernel serves this call (`split_for` is not None)."""
    split = split_for(qkv, k_cache, hq, bound, max_bound, min_cluster, two_tiles, tiles_from)
    return split is not None


def launch(
    qkv: torch.Tensor, q_norm: torch.Tensor, k_norm: torch.Tensor, cos: torch.Tensor,
    sin: torch.Tensor, positions: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    seq_lens: torch.Tensor, scale: float, eps: float, out: torch.Tensor, pdl: bool,
    split: Split,
) -> None:  # fmt: skip
    """One launch over a host-side bound >= every seq_lens[b] (as the Triton path's), split as
    `split_for` gave it for that bound."""
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
    group = (qkv.shape[1] // k_cache.shape[3] - 2 * hkv) // hkv
    ints = (ctypes.c_int * 9)(
        split.warps, hkv, S, cos.shape[0], B, index, split.cluster, group, split.tiles
    )
    strides = (ctypes.c_int64 * 9)(
        qkv.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1),
    )  # fmt: skip
    stream = torch.cuda.current_stream(qkv.device).cuda_stream
    err = lib.evk_attention_direct(DTYPES[qkv.dtype], int(pdl), ptrs, floats, ints, strides,
                                   ctypes.c_void_p(stream))  # fmt: skip
    if err != 0:
        raise RuntimeError(f"CUDA attention launch failed: {lib.evk_error_string(err).decode()}")
