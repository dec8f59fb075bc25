"""`DecodeTuning`: every launch choice of the decode layer's kernels, in one immutable record.

The engine's fused decode ops (ops/decode.py) and the `decode_layer` task's seed (generated
from ops/layer.py, tasks/decode_layer/generate.py) read the same record: the seed builds one
from the knobs of its EVOLVE-BLOCK, so what `tune` searches is exactly what the engine runs.
No field changes a result beyond float32 summation order, but those of the engine's CUDA rows
kernel (ops/rows_cuda.py), which rounds the norm once where transformers rounds twice.

It is a `typing.NamedTuple` (not a dataclass) because its source is copied into the seed,
whose imports are limited to torch, triton, math, functools and typing; `check_tuning` holds
the validation a dataclass would do in `__post_init__`.
"""

from __future__ import annotations

from typing import NamedTuple

# The names a `quant` entry may use (ops/quant.py: formats of model/quant/packed.py, the
# fused ops, the dequantisation modes of kernels/quant_gemv.py, and "cuda": the CUDA C++
# 4-bit kernel of ops/quant_cuda.py where it applies, else the first Triton rule).
QUANT_FORMATS = ("fp8", "int8", "int4")
QUANT_OPS = ("norm_linear", "linear_residual", "gate_up", "head")
TRITON_MODES = ("convert", "magic", "early", "interleave")  # kernels/quant_gemv.py DEQ, in order
QUANT_MODES = (*TRITON_MODES, "cuda")


class DecodeTuning(NamedTuple):
    """Launch choices of the fused decode kernels (none changes a result)."""

    pdl: bool = False  # programmatic dependent launch (sm_90+)
    tile_bytes: int = 32 * 1024  # weight bytes per one-row GEMV program (a power of two)
    gemv_warps: int = 0  # 0: 8 for tiles of >= 16K elements, else 4
    rows_min: int = 3  # from this many rows the tensor-core rows kernel (kernels/rows.py)
    rows_block_n: int = 0  # its output columns per program (0: >= 1 wave, 16..64)
    rows_tile_bytes: int = 64 * 1024  # weights a program may keep in registers
    rows_block_k: int = 1024  # the widest K slice a program holds (K split over programs)
    rows_warps: int = 2
    rows_swap: bool = True  # its MMA's row operand the weights (BLOCK_N >= 16 per warp)
    rows_block_m: int = 64  # its widest tile of batch rows (16..64; fewer rows, narrower)
    rows_prenorm: int = 2  # normalise x once ahead of it: 0 never, 1 the head, 2 every op
    # Up to this K (padded to a power of two; 0 never) and this many rows, a rows program takes
    # the whole K, split over its warps (no cross-program merge)
    rows_whole_k: int = 2048
    rows_whole_k_rows: int = 8
    rows_whole_k_n: int = 16  # its output columns a program (8, 16 or 32)
    rows_part_k: int = 128  # whole K: the K slice of each part of the batched dot
    # Where the whole-K kernel does not apply, up to rows_block_m rows: the streaming rows
    # kernel (weights through a pipeline of K chunks) instead of the split kernel
    rows_stream: bool = True
    stream_block_n: int = 64  # its output columns a program (gate_up: of gate and of up)
    stream_block_k: int = 128  # K a pipeline stage
    stream_stages: int = 4  # stages in flight (fewer where shared memory cannot hold them)
    stream_prefetch: int = 2  # chunks asked of L2 before the PDL wait (0: none)
    stream_programs: int = 0  # K split until the programs reach this (0: the SMs)
    stream_warps: int = 4
    # The deep ops (K at least twice N: o_proj and down) on the streaming kernel from
    # stream_deep_rows rows: their own columns a program, K chunk and program target (0: the
    # stream_* value above)
    stream_deep_rows: int = 17
    stream_deep_n: int = 16
    stream_deep_k: int = 512
    stream_deep_programs: int = 0
    attn_block_n: int = 64  # positions per attention tile
    short_block_n: int = 16  # if set, the tile for bounds <= short_max (the first graph bucket)
    short_warps: int = 0  # if set, the attention's warps for bounds <= short_max
    short_mma: bool = False  # bounds <= short_max: tensor-core products (else CUDA cores)
    short_max: int = 256
    attn_warps: int = 4
    combine_warps: int = 1  # the second kernel that merges the split's chunks
    direct_max: int = 16  # up to this bound one program per kv head (no split)
    ticket_combine: bool = False  # split chunks merged in the attention launch, not a second
    # Fused attention bounded by <= cuda_direct_max positions: the CUDA C++ one-pass kernel
    # where it applies (ops/attention_cuda.py; the engine only: a task candidate cannot build
    # it)
    cuda_direct: bool = True
    cuda_direct_max: int = 2048  # up to this bound (at most 4,096: past 2,048 by two tiles)
    cuda_cluster: int = 4  # its CTAs per kv head beyond 256 rows (at least; 1..8)
    # two tiles a warp (the second in shared memory) where the one-tile clusters exceed half
    # the SMs (batched decode), and from the bound cuda_tiles_from at any batch (0: never)
    cuda_tiles: bool = True
    cuda_tiles_from: int = 0
    # The residual projections (o_proj, down) from cuda_rows_min to cuda_rows_max rows (0:
    # never), within those the normed ones from cuda_rows_norm (norm_linear: qkv) and
    # cuda_rows_gate_up rows (0: never), and the head with cuda_rows_head: the CUDA C++
    # tensor-core kernel where it applies (ops/rows_cuda.py; the engine only), its warps a CTA
    # cuda_rows_warps (0: by K). Measured on an H200 (docs/perf-log.md): o_proj and down 15-25%
    # faster than the Triton rows kernels from 4 to 16 rows, qkv faster from 4 rows (its norm
    # in the epilogue), gate_up at 16 rows but not at 8, the head slower; at 2 rows slower than
    # the one-row kernels
    cuda_rows_min: int = 3
    cuda_rows_max: int = 16
    cuda_rows_warps: int = 0
    cuda_rows_norm: int = 3
    cuda_rows_gate_up: int = 9
    cuda_rows_head: bool = False
    min_chunk: int = 16  # beyond it, positions per attention program at the least
    attn_programs_per_sm: int = 2  # B * Hkv * SPLIT up to this many per SM
    max_split: int = 64
    # Batch 1 with bounds up to persistent_max (0 never): every layer in one persistent launch
    # (ops/persistent.py, the engine only), its attention in chunks of at least
    # persistent_attn_rows rows a kv head
    persistent_max: int = 0
    persistent_attn_rows: int = 112  # 7 warps of 16-row tiles
    # Packed (quantized) projections: (format, op, K, mode, warps, tile_bytes) entries that
    # override ops/quant.py's `CHOICES` table for the weights of that format, op and K (the
    # dequantisation mode, warps with 0 for "by the tile", a program's tile bytes with 0 for
    # the launcher's default); set by a kernel pack's measured choices (tune/quant.py)
    quant: tuple[tuple[str, str, int, str, int, int], ...] = ()

    def attention_block_n(self, bound: int) -> int:
        """Positions per attention tile for a launch bounded by `bound`."""
        if self.short_block_n and bound <= self.short_max:
            return self.short_block_n
        return self.attn_block_n

    def attention_mma(self, bound: int) -> bool:
        """Whether a launch bounded by `bound` runs the attention's products on tensor cores."""
        return self.short_mma or bound > self.short_max

    def attention_warps(self, bound: int) -> int:
        """Warps per attention program for a launch bounded by `bound`."""
        if self.short_warps and bound <= self.short_max:
            return self.short_warps
        return self.attn_warps


def check_tuning(t: DecodeTuning) -> DecodeTuning:
    """`t`, or an AssertionError naming the first field out of range."""
    for name in ("tile_bytes", "attn_block_n", "direct_max", "min_chunk", "max_split",
                 "short_max", "rows_block_k", "rows_tile_bytes", "rows_part_k",
                 "cuda_direct_max"):  # fmt: skip
        value = getattr(t, name)
        assert value >= 1 and value & (value - 1) == 0, f"{name} must be a power of two"
    assert t.attn_block_n >= 16 and t.gemv_warps in (0, 1, 2, 4, 8, 16), "attn_block_n/gemv_warps"
    short = t.short_block_n
    assert short == 0 or (short >= 16 and short & (short - 1) == 0), "short_block_n"
    assert t.short_warps in (0, 1, 2, 4, 8) and t.attn_warps in (1, 2, 4, 8), "attention warps"
    assert t.combine_warps in (1, 2, 4, 8), "combine_warps"
    assert t.rows_min >= 1 and t.rows_warps in (1, 2, 4, 8), "rows_min/rows_warps"
    assert t.rows_block_n in (0, 16, 32, 64, 128) and t.rows_block_k >= 64, "rows blocks"
    assert t.rows_prenorm in (0, 1, 2) and t.rows_block_m in (16, 32, 64), "rows_prenorm/m"
    assert t.rows_part_k >= 16, "rows_part_k"
    assert t.stream_block_n in (16, 32, 64, 128) and t.stream_warps in (1, 2, 4, 8), "stream"
    assert t.stream_block_k in (32, 64, 128, 256, 512) and t.stream_stages >= 1, "stream"
    assert t.stream_prefetch >= 0 and t.stream_programs >= 0, "stream"
    assert t.stream_deep_n in (0, 16, 32, 64, 128), "stream_deep_n"
    assert t.stream_deep_k in (0, 32, 64, 128, 256, 512), "stream_deep_k"
    assert t.stream_deep_programs >= 0 and t.stream_deep_rows >= 1, "stream_deep_programs/rows"
    whole, whole_rows = t.rows_whole_k, t.rows_whole_k_rows
    assert whole == 0 or (whole >= 16 and whole & (whole - 1) == 0), "rows_whole_k"
    assert whole_rows >= 1 and t.rows_whole_k_n in (8, 16, 32), "rows_whole_k_rows/n"
    assert t.attn_programs_per_sm >= 1, "attn_programs_per_sm"
    assert 1 <= t.cuda_cluster <= 8 and t.cuda_tiles_from >= 0, "cuda_cluster/cuda_tiles_from"
    assert t.cuda_rows_min >= 0 and 1 <= t.cuda_rows_max <= 32, "cuda_rows_min/max"
    assert 0 <= t.cuda_rows_warps <= 16, "cuda_rows_warps"
    assert t.cuda_rows_norm >= 0 and t.cuda_rows_gate_up >= 0, "cuda_rows_norm/gate_up"
    assert t.persistent_max >= 0, "persistent_max"
    assert t.persistent_attn_rows >= 16 and t.persistent_attn_rows % 16 == 0, "persistent_attn_rows"
    for entry in t.quant:
        assert len(entry) == 6, "quant entries are (format, op, K, mode, warps, tile_bytes)"
        fmt, op, k, mode, warps, tile = entry
        assert fmt in QUANT_FORMATS and op in QUANT_OPS and mode in QUANT_MODES, f"quant {entry}"
        assert k >= 1 and warps in (0, 1, 2, 4, 8, 16), f"quant {entry}"
        assert tile == 0 or (tile >= 1024 and tile & (tile - 1) == 0), f"quant {entry}"
    return t


DEFAULT = DecodeTuning()
