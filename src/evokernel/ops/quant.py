"""Launchers of the fused decode kernels on packed weights (kernels/quant_gemv.py).

Same signatures and results as the dense fused ops of ops/decode.py, with a packed weight
(model/quant/packed.py: `Fp8Weight`, `Int4Weight`, `Int8Weight`) in place of the tensor:

  norm_linear(x [M, K], norm_weight [K], weight [N, K], eps, bias=None)  -> [M, N]
  linear_residual(x [M, K], weight [N, K], residual [M, N])   residual += round(W @ x)
  norm_gate_up_silu(x [M, H], norm_weight [H], gate_up [2I, H], eps)     -> [M, I]
  norm_logits(x [M, H], norm_weight [H], lm_head [V, H], eps)            -> [M, V] float32
  greedy_head(x, norm_weight, lm_head, eps, tokens [M], positions, seq_lens)  (in place)
  linear(x [M, K], weight [N, K])                                        -> [M, N]

  head_keys(x, norm_weight, lm_head, eps, keys [>= M] int64)   each row's argmax key atomically
      maxed into keys (kernels/gemv.py `argmax_key`): greedy_head's first launch, for a
      caller that runs the finishing kernel itself

Rows: 1..`MAX_ROWS` per fused call (the decode batch), as a loop over the weight tile held in
registers: built for a few rows (a step reads the weights once whatever the batch; beyond
~16 rows the CUDA-core products, not the bytes, set the time). `linear` takes any number,
running the kernel up to `LINEAR_KERNEL_ROWS` rows and the dequantized weight through torch
beyond (prefill). Activations bfloat16 / float16 (float32 under the CPU interpreter).

One row of a 4-bit weight from K 2,560 runs the CUDA C++ kernel of ops/quant_cuda.py instead
(the "cuda" choice below; its launch: `cuda_launch`).

Launch sizes: a program owns BLOCK_N rows and the whole K: as many values as the bf16
kernels' `tuning.tile_bytes` tile (so a quarter of those bytes, packed, at 4 bits: registers
follow the values), with BLOCK_N lowered until there are at least as many programs as SMs,
as the dense launchers do (`block_n`); the head's tile is at least `HEAD_TILE_BYTES`, and an
"early" dequantisation (below) counts 4 bytes a value. Warps: `tuning.gemv_warps`, else 8 for
tiles of >= 16K values and 4 below. How each op turns packed values into floats, its warps
and its tile: `choice` (`tuning.quant`'s entry for the weight's format, op and K, else
`CHOICES`, per format, op and K). Everything depends on shapes and
host-side values only: no host sync, graph-capturable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from evokernel.model.quant.packed import Fp8Weight, Int4Weight, IntWeight
from evokernel.model.weights import PackedWeight
from evokernel.ops import quant_cuda
from evokernel.ops.grid import cdiv, check_rows, next_pow2
from evokernel.ops.layer import sm_count
from evokernel.ops.tuning import DEFAULT, QUANT_OPS, TRITON_MODES, DecodeTuning

LINEAR_KERNEL_ROWS = 16
# How and when the kernels turn packed values into float32 (kernels/quant_gemv.py DEQ):
#   "convert"     Triton's casts (I2FP, or FP8 pairs through float16) after the PDL wait;
#   "magic"       bit placement into a float32 with no conversion instruction, after the wait;
#   "early"       the casts and the scales before the wait, into a float32 tile (registers
#                 for 4 bytes a value: half the values a program);
#   "interleave"  (4 bits) a byte's two values interleaved into column order, so that the
#                 activations load contiguously, or through act-order's permutation in
#                 column order (8 bits: "convert");
#   "cuda"        (4 bits, one activation row) the CUDA C++ tensor-core kernel of
#                 ops/quant_cuda.py, where it applies; elsewhere (more rows, a CPU, no nvcc,
#                 a K not a multiple of 128, a group size not 128 times a power of two) the
#                 Triton `fallback`, the first non-"cuda" rule that covers the K.
#                 Its rules (from K 2,560; the residual ops above 3,072, with 8 warps a
#                 CTA to K 4,096 and 16 beyond; the head at every K, 8 warps) are H100
#                 measurements at Qwen3-4B's and -8B's shapes (o_proj's 8 warps: `tune` on
#                 the 8B INT4 checkpoint, +2.5% on the step at position 1 against 16, which
#                 are faster alone); at Qwen3-0.6B's K 1,024 its faster stages made a slower
#                 step (`decode_stages`, docs/perf-log.md).
# The same products every way. `CHOICES` holds, per format and op, rules (max K, mode,
# warps): the first whose max K (None: any) is at least the weight's K applies (warps 0: by
# the tile's values). Each is the fastest in `bench/quant_kernels.py` runs on an H100 at
# Qwen3-0.6B's shapes (K 1,024-3,072) and at Qwen3-8B's (K 4,096-12,288), checked on an H200
# at 0.6B (docs/perf-log.md, "Quantized decode, second kernels"). The best choice moves with
# the shape: an "early" FP8 qkv is ~20% faster at K 1,024 and 18% slower at 4,096; 4-bit
# per-value passes (`convert`, `magic`, strided activations) beat `interleave` by 12% at
# K 1,024 (qkv) and are 3x slower at 2,048 (o_proj), 4-17x at 8B. A table measured at two
# shapes, not a search: `tune` measures the declared space (`modes`, WARPS, TILE_BYTES,
# HEAD_TILES) on a checkpoint's own weights and a kernel pack carries what it chose as
# `DecodeTuning.quant` entries, which take precedence (tune/quant.py). `DEQUANT`, when set,
# forces one mode for every launch in the process (the bench's variants);
# `DecodeTuning.gemv_warps` the warps.
DEQ_CODES = {mode: code for code, mode in enumerate(TRITON_MODES)}  # kernels/quant_gemv.py DEQ
OPS = QUANT_OPS
GATHER_K = 4096  # act-order: from this K the launcher gathers the activations (`layout`)
Choice = tuple[str, int, int]  # (mode, warps: 0 by the tile, tile bytes: 0 the launcher's)
Rule = tuple[int | None, str, int]  # (max K or None, mode, warps)
CHOICES: dict[tuple[str, str], tuple[Rule, ...]] = {
    ("fp8", "norm_linear"): ((2048, "early", 0), (None, "convert", 0)),
    ("fp8", "linear_residual"): ((None, "convert", 8),),
    ("fp8", "gate_up"): ((2048, "early", 0), (None, "convert", 0)),
    ("fp8", "head"): ((None, "convert", 4),),
    ("int8", "norm_linear"): ((2048, "early", 0), (None, "magic", 0)),
    ("int8", "linear_residual"): ((None, "magic", 0),),
    ("int8", "gate_up"): ((2048, "convert", 0), (None, "convert", 4)),
    ("int8", "head"): ((None, "convert", 4),),
    ("int4", "norm_linear"): (
        (1024, "magic", 0),
        (2048, "interleave", 0),
        (None, "cuda", 8),
        (None, "interleave", 4),
    ),
    ("int4", "linear_residual"): (
        (3072, "interleave", 4),
        (4096, "cuda", 8),
        (None, "cuda", 16),
        (None, "interleave", 4),
    ),
    ("int4", "gate_up"): ((2048, "interleave", 0), (None, "cuda", 8), (None, "interleave", 4)),
    ("int4", "head"): ((None, "cuda", 8), (None, "interleave", 4)),
}
DEQUANT: str | None = None
# The head's programs take this many tile bytes at the least (its 150K rows make plenty of
# programs; larger tiles cut their number and per-program overhead: 8-13% on an H100).
HEAD_TILE_BYTES = 64 * 1024
PER_VALUE_MAX_K = 1024  # 4 bits: per-value passes measured no faster than `interleave` beyond
# `tune`'s declared space besides the modes: warps (0: by the tile) and tile bytes (0: the
# launcher's `tuning.tile_bytes`, the head's at least HEAD_TILE_BYTES)
WARPS = (0, 4, 8)
TILE_BYTES = (0, 8 * 1024, 16 * 1024, 64 * 1024)
HEAD_TILES = (0, 128 * 1024)


@dataclass(frozen=True)
class Layout:
    """A packed weight as the kernels take it: four pointers, three strides, constexprs,
    and the act-order permutation the launcher gathers the activations through (`gather`)."""

    tensors: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # q, s, z, perm
    strides: tuple[int, int, int]
    meta: dict[str, Any]
    row_bytes: int  # packed bytes one row loads (padding included)
    values_per_row: int  # values one row unpacks (padding included)
    warps: int = 0  # the op's warps for this format (0: by the tile's values)
    tile_bytes: int = 0  # a program's tile bytes (0: the launcher's `tuning.tile_bytes`)
    gather: torch.Tensor | None = None  # int32 [K]: stored column c is input column gather[c]

    def stored(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        """`t` (the activations [M, K], dim 1, or a norm weight [K], dim 0) in the weight's
        stored column order when the launcher gathers for this weight, else `t` itself."""
        return t if self.gather is None else t.index_select(dim, self.gather)


def choice(w: PackedWeight, op: str, tuning: DecodeTuning = DEFAULT) -> Choice:
    """(mode, warps, tile bytes) `op` (one of OPS) runs `w` with: `tuning.quant`'s entry for
    its format, op and K where there is one (a pack's measured choice), else the first of
    `CHOICES`' rules for its format and op that covers its K (tile bytes 0: the launcher's);
    the mode forced by `DEQUANT` if set."""
    assert op in OPS, op
    K = w.shape[1]
    for fmt, o, k, mode, warps, tile in tuning.quant:
        if (fmt, o, k) == (w.format, op, K):
            return DEQUANT or mode, warps, tile
    rules = CHOICES.get((w.format, op), ((None, "convert", 0),))
    mode, warps = next((m, wp) for k, m, wp in rules if k is None or k >= K)
    return DEQUANT or mode, warps, 0


def triton_rule(fmt: str, op: str, K: int) -> tuple[str, int]:
    """The Triton table's (mode, warps) for a format, op and K: the first of `CHOICES`'
    non-"cuda" rules that covers K."""
    rules = CHOICES.get((fmt, op), ((None, "convert", 0),))
    return next((m, wp) for k, m, wp in rules if m != "cuda" and (k is None or k >= K))


def fallback(w: PackedWeight, op: str) -> tuple[str, int]:
    """The Triton (mode, warps) a "cuda" choice runs where the CUDA kernel does not apply
    (`triton_rule` at the weight's format and K)."""
    return triton_rule(w.format, op, w.shape[1])


def modes(w: PackedWeight, op: str) -> tuple[str, ...]:
    """The dequantisation modes `op` may run `w` with (`tune`'s declared space for them):
    every mode of its format, except the 4-bit per-value passes above K 1,024 (3-17x
    slower than `interleave` there: the known-bad region, never sampled); "cuda" for a
    4-bit weight the CUDA kernel is written for."""
    assert op in OPS, op
    if w.format != "int4":
        return ("convert", "magic", "early")
    cuda = ("cuda",) if quant_cuda.shape_fits(w) else ()
    if w.shape[1] > PER_VALUE_MAX_K:
        return ("interleave", *cuda)
    return ("interleave", "convert", "magic", "early", *cuda)


def layout(w: PackedWeight, op: str = "norm_linear", tuning: DecodeTuning = DEFAULT) -> Layout:
    """The kernels' view of `w` for `op`: its packed values as a byte tensor [N, row bytes]
    (an int32 word's values are its little-endian bytes' in order), scales, zero points,
    permutation, and the constexprs (DEQ and the warps from `choice`). An act-order
    permutation is the kernel's to gather through (HAS_PERM) below GATHER_K columns and the
    launcher's from there and wherever the choice is "cuda", as that kernel cannot
    (`Layout.gather`: one gather launch for the row, then contiguous loads): on an H100
    the kernel's per-value gather is 1.4-3x faster than the extra launches at Qwen3-0.6B's
    K (1,024-3,072) and mostly 1.6-4.5x slower at Qwen3-8B's (4,096-12,288;
    docs/perf-log.md)."""
    _N, K = w.shape
    mode, warps, tile = choice(w, op, tuning)
    cuda = mode == "cuda"
    if cuda:
        mode, warps = fallback(w, op)
    deq = DEQ_CODES[mode]
    magic = mode == "magic"
    if isinstance(w, Fp8Weight):
        gs = w.block_k
        ng, gb = next_pow2(cdiv(K, gs)), next_pow2(gs)
        q, s = w.weight, w.scale
        assert _rows_contiguous(q) and _rows_contiguous(s)
        if magic:
            q = q.view(torch.uint8)
        meta = dict(FP8=True, BITS=8, GS=gs, NG=ng, GB=gb, SCALE_ROWS=w.block_n, HAS_Z=False,
                    ZOFF=0, HAS_PERM=False, DEQ=deq)  # fmt: skip
        return Layout(
            (q, s, s, s),
            (q.stride(0), s.stride(0), 0),
            meta,
            ng * gb + 4 * ng,
            ng * gb,
            warps,
            tile,
        )
    assert isinstance(w, IntWeight), type(w)
    gs = w.group_size
    ng, gb = next_pow2(w.groups), next_pow2(gs * w.bits // 8)
    s = w.scales
    z = w.zeros if w.zeros is not None else s
    in_kernel = w.perm is not None and K < GATHER_K and not cuda  # the CUDA kernel cannot
    p = w.perm if w.perm is not None and in_kernel else s
    assert _rows_contiguous(w.qweight) and _rows_contiguous(s) and _rows_contiguous(z)
    q = w.qweight.view(torch.uint8)  # [N, 4 * words]: the words' bytes, little-endian
    meta = dict(FP8=False, BITS=w.bits, GS=gs, NG=ng, GB=gb, SCALE_ROWS=1,
                HAS_Z=w.zeros is not None, ZOFF=w.zero_offset,
                HAS_PERM=in_kernel, DEQ=deq)  # fmt: skip
    row_bytes = ng * gb + ng * (s.element_size() + (1 if w.zeros is not None else 0))
    return Layout((q, s, z, p), (q.stride(0), s.stride(0), z.stride(0)), meta, row_bytes,
                  ng * gb * (8 // w.bits), warps, tile,
                  None if in_kernel else w.perm)  # fmt: skip


def cuda_launch(
    w: PackedWeight, op: str, x: torch.Tensor, tuning: DecodeTuning,
    norm_weight: torch.Tensor | None = None,
) -> quant_cuda.Launch | None:  # fmt: skip
    """The CUDA kernel's launch settings where `op` runs `w` on it for these rows (its choice
    is "cuda" and `quant_cuda.applies`), else None. `tuning.gemv_warps`, else the choice's
    warps, when set, are the CTA's (the head's at most `quant_cuda.HEAD_MAX_WARPS`)."""
    mode, warps, _tile = choice(w, op, tuning)
    if mode != "cuda" or not quant_cuda.applies(x, w, norm_weight):
        return None
    base = quant_cuda.DEFAULT_LAUNCH
    most = quant_cuda.HEAD_MAX_WARPS if op == "head" else quant_cuda.MAX_WARPS
    return base._replace(warps=min(most, tuning.gemv_warps or warps or base.warps))


def _rows_contiguous(t: torch.Tensor) -> bool:
    """Each row's elements adjacent (a one-column tensor's column stride is meaningless)."""
    return t.dim() == 1 or t.shape[-1] == 1 or t.stride(-1) == 1


def block_n(N: int, lay: Layout, device: torch.device, tuning: DecodeTuning, tiles: int = 1) -> int:
    """Rows per program: as many values as the bf16 kernels' tile of `tile_bytes` holds
    (`tiles` weight tiles per row), a power of two, lowered to at least one program per SM.

    Values, not packed bytes: a program's registers grow with the values it unpacks and the
    activations it pairs them with (sm_90 builds at Qwen3-0.6B's shapes: int4 tiles of 32 KB
    packed need 255 registers a thread, one program per SM; of 16K values, 128)."""
    per_row = (4 if lay.meta["DEQ"] == DEQ_CODES["early"] else 2) * lay.values_per_row * tiles
    block = max(1, min(next_pow2(N), (lay.tile_bytes or tuning.tile_bytes) // per_row))
    block = 1 << (block.bit_length() - 1)
    while block > 1 and cdiv(N, block) < sm_count(device):
        block //= 2
    return block


def _warps(block: int, lay: Layout, tuning: DecodeTuning, tiles: int = 1) -> int:
    if tuning.gemv_warps or lay.warps:
        return tuning.gemv_warps or lay.warps
    return 8 if block * lay.values_per_row * tiles >= 16384 else 4


def _check_rows(x: torch.Tensor, K: int) -> int:
    assert x.dtype in (torch.bfloat16, torch.float16, torch.float32), x.dtype
    return check_rows(x, K)


def _check(weight: PackedWeight, x: torch.Tensor, op: str, tuning: DecodeTuning) -> Layout:
    assert isinstance(weight, PackedWeight), type(weight)
    assert weight.device == x.device, (weight.device, x.device)
    return layout(weight, op, tuning)


def norm_linear(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    weight: PackedWeight,
    eps: float,
    bias: torch.Tensor | None = None,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> torch.Tensor:
    _N, K = weight.shape
    _check_rows(x, K)
    assert norm_weight.shape == (K,) and norm_weight.dtype == x.dtype
    return _gemv(x, norm_weight, weight, eps, bias, tuning, norm=True)


def _gemv(
    x: torch.Tensor,
    norm_weight: torch.Tensor | None,
    weight: PackedWeight,
    eps: float,
    bias: torch.Tensor | None,
    tuning: DecodeTuning,
    norm: bool,
) -> torch.Tensor:
    from evokernel.kernels.quant_gemv import quant_norm_gemv_kernel

    N, K = weight.shape
    M = x.shape[0]
    lay = _check(weight, x, "norm_linear", tuning)
    if bias is not None:
        assert bias.shape == (N,) and bias.dtype == x.dtype and bias.stride(0) == 1
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    x = lay.stored(x, 1)
    if norm_weight is not None:
        norm_weight = lay.stored(norm_weight, 0)
    settings = cuda_launch(weight, "norm_linear", x, tuning, norm_weight)
    if settings is not None:
        assert isinstance(weight, Int4Weight)
        quant_cuda.launch(quant_cuda.OP_LINEAR, x, weight, y, norm_weight=norm_weight, eps=eps,
                          bias=bias, pdl=tuning.pdl, settings=settings)  # fmt: skip
        return y
    bn = block_n(N, lay, x.device, tuning)
    quant_norm_gemv_kernel[(cdiv(N, bn),)](
        x, norm_weight if norm_weight is not None else x, *lay.tensors,
        bias if bias is not None else x, y, M, N, x.stride(0), *lay.strides[:3], y.stride(0),
        eps, K=K, BLOCK_N=bn, NORM=norm, HAS_BIAS=bias is not None,
        PDL=tuning.pdl, num_warps=_warps(bn, lay, tuning), launch_pdl=tuning.pdl, **lay.meta,
    )  # fmt: skip
    return y


def linear(x: torch.Tensor, weight: PackedWeight) -> torch.Tensor:
    """y = x @ W^T for any number of rows: the kernel up to LINEAR_KERNEL_ROWS, beyond it
    the weight dequantized to x's dtype and torch's matmul (prefill)."""
    _N, K = weight.shape
    assert x.dim() == 2 and x.shape[1] == K, (tuple(x.shape), K)
    if x.shape[0] > LINEAR_KERNEL_ROWS or x.shape[0] == 0:
        return torch.nn.functional.linear(x, weight.dequantize(x.dtype))
    x = x if x.stride(1) == 1 else x.contiguous()
    _check_rows(x, K)
    return _gemv(x, None, weight, 0.0, None, DEFAULT, norm=False)


def linear_residual(
    x: torch.Tensor,
    weight: PackedWeight,
    residual: torch.Tensor,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> torch.Tensor:
    from evokernel.kernels.quant_gemv import quant_gemv_add_kernel

    N, K = weight.shape
    M = _check_rows(x, K)
    assert residual.shape == (M, N) and residual.stride(1) == 1 and residual.dtype == x.dtype
    lay = _check(weight, x, "linear_residual", tuning)
    x = lay.stored(x, 1)
    settings = cuda_launch(weight, "linear_residual", x, tuning)
    if settings is not None and residual.is_contiguous():
        assert isinstance(weight, Int4Weight)
        quant_cuda.launch(quant_cuda.OP_RESIDUAL, x, weight, residual, pdl=tuning.pdl,
                          settings=settings)  # fmt: skip
        return residual
    bn = block_n(N, lay, x.device, tuning)
    quant_gemv_add_kernel[(cdiv(N, bn),)](
        x, *lay.tensors, residual, M, N, x.stride(0), *lay.strides, residual.stride(0),
        K=K, BLOCK_N=bn, PDL=tuning.pdl, num_warps=_warps(bn, lay, tuning),
        launch_pdl=tuning.pdl, **lay.meta,
    )  # fmt: skip
    return residual


def norm_gate_up_silu(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    gate_up: PackedWeight,
    eps: float,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> torch.Tensor:
    from evokernel.kernels.quant_gemv import quant_norm_gate_up_kernel

    two_i, K = gate_up.shape
    M = _check_rows(x, K)
    assert two_i % 2 == 0 and norm_weight.shape == (K,) and norm_weight.dtype == x.dtype
    lay = _check(gate_up, x, "gate_up", tuning)
    inter = two_i // 2
    act = torch.empty((M, inter), device=x.device, dtype=x.dtype)
    x, norm_weight = lay.stored(x, 1), lay.stored(norm_weight, 0)
    settings = cuda_launch(gate_up, "gate_up", x, tuning, norm_weight)
    if settings is not None:
        assert isinstance(gate_up, Int4Weight)
        quant_cuda.launch(quant_cuda.OP_GATE_UP, x, gate_up, act, norm_weight=norm_weight,
                          eps=eps, pdl=tuning.pdl, settings=settings)  # fmt: skip
        return act
    bn = block_n(inter, lay, x.device, tuning, tiles=2)
    quant_norm_gate_up_kernel[(cdiv(inter, bn),)](
        x, norm_weight, *lay.tensors, act, M, inter, x.stride(0), *lay.strides, act.stride(0),
        eps, K=K, BLOCK_N=bn, PDL=tuning.pdl,
        num_warps=_warps(bn, lay, tuning, tiles=2), launch_pdl=tuning.pdl, **lay.meta,
    )  # fmt: skip
    return act


def _head(
    x: torch.Tensor, norm_weight: torch.Tensor, lm_head: PackedWeight, eps: float,
    logits: torch.Tensor | None, keys: torch.Tensor | None, tuning: DecodeTuning,
) -> None:  # fmt: skip
    """The normed packed lm_head: into `logits` [M, V] if given, and each row's argmax key
    atomically maxed into `keys` [M] if given (ops/decode.py `_head`)."""
    from evokernel.kernels.quant_gemv import quant_norm_head_kernel

    V, K = lm_head.shape
    M = _check_rows(x, K)
    assert norm_weight.shape == (K,) and norm_weight.dtype == x.dtype
    lay = _check(lm_head, x, "head", tuning)
    x_st, norm_st = lay.stored(x, 1), lay.stored(norm_weight, 0)
    cuda = cuda_launch(lm_head, "head", x_st, tuning, norm_st)
    if cuda is not None:
        assert isinstance(lm_head, Int4Weight)
        quant_cuda.launch(quant_cuda.OP_HEAD, x_st, lm_head, logits, norm_weight=norm_st,
                          eps=eps, keys=keys, pdl=tuning.pdl, settings=cuda)  # fmt: skip
        return
    # At least HEAD_TILE_BYTES, unless the layout's choice names its own tile
    tuning = tuning._replace(tile_bytes=max(tuning.tile_bytes, HEAD_TILE_BYTES))
    bn = block_n(V, lay, x.device, tuning)
    out = logits if logits is not None else x  # an unused pointer argument
    x, norm_weight = x_st, norm_st
    quant_norm_head_kernel[(cdiv(V, bn),)](
        x, norm_weight, *lay.tensors, keys if keys is not None else out, out, M, V,
        x.stride(0), *lay.strides, out.stride(0), eps, K=K, BLOCK_N=bn,
        WRITE_LOGITS=logits is not None, ARGMAX=keys is not None, PDL=tuning.pdl,
        num_warps=_warps(bn, lay, tuning), launch_pdl=tuning.pdl, **lay.meta,
    )  # fmt: skip


def head_keys(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    lm_head: PackedWeight,
    eps: float,
    keys: torch.Tensor,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> None:
    """Each row's argmax key (value, then lowest id) atomically maxed into `keys` [>= M],
    which must hold zeros (ops/decode.py `argmax_keys`)."""
    assert keys.dtype == torch.int64 and keys.numel() >= x.shape[0]
    _head(x, norm_weight, lm_head, eps, None, keys, tuning)


def norm_logits(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    lm_head: PackedWeight,
    eps: float,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> torch.Tensor:
    logits = torch.empty((x.shape[0], lm_head.shape[0]), device=x.device, dtype=torch.float32)
    _head(x, norm_weight, lm_head, eps, logits, None, tuning)
    return logits
