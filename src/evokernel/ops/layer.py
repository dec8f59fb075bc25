"""Launchers of the decode layer's Triton kernels: the one source of the engine's layer and of
the `decode_layer` task's seed.

The engine's fused decode ops (ops/decode.py) check their arguments and call these; the seed
(tasks/decode_layer/seed.py) is generated from this module and the kernels it launches
(tasks/decode_layer/generate.py copies their source), so the two cannot drift: a test
regenerates the seed and compares. Hence the rules for this file: it imports only torch,
triton, functools and math, plus `from evokernel.kernels.<module> import <names>` lines
(which the generator replaces by the kernels' source); every launch choice comes from a
`DecodeTuning` (ops/tuning.py) passed in; dense weights only (packed formats are dispatched
by ops/decode.py before these are reached); no asserts (the callers check).

  norm_linear(x [M, K], norm_weight [K], weight [N, K], bias [N] | None, eps, tuning)
        -> round(W @ rms_norm(x) + bias)                                      [M, N]
  linear_residual(x [M, K], weight [N, K], residual [M, N], tuning)  residual += round(W @ x)
  norm_gate_up_silu(x [M, H], norm_weight [H], gate_up [2I, H], eps, tuning)
        -> round(round(silu(round(Wg @ n))) * round(Wu @ n)), n = rms_norm(x)    [M, I]
  attention(q, q_norm, k_norm, cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps,
            max_len, hq, stride_qb, stride_qh, fused, tuning, split)  -> out [B, Hq * D]
        the Triton attention (kernels/attention.py): fused with the q/k prep and the cache
        append (`fused`, q the packed qkv), else over q [B, Hq, D] already rotated; `split`
        None sizes the split by `attention_split`.

Rows: M < tuning.rows_min rows run the one-row CUDA-core kernels (kernels/gemv.py: each
program's weight tile in registers, loaded before the PDL wait); from rows_min rows on, the
tensor-core rows kernels (kernels/rows.py), which read each weight once for the whole batch:
up to `rows_whole_k_rows` rows and K (padded) up to `rows_whole_k`, where the device's shared
memory holds a program's operands, the whole-K kernel (each program the whole K, split over
its warps: `rows_whole_k_blocks`); otherwise, up to `rows_block_m` rows, the streaming kernel
(weights through a pipeline of K chunks: `rows_stream_blocks`), and past that, or with
`rows_stream` off, the kernel that splits K over programs and merges their partials
(`rows_blocks`).
"""

import functools

import torch
import triton

from evokernel.kernels.attention import attention_combine_kernel, attention_kernel
from evokernel.kernels.gemv import gemv_add_kernel, norm_gate_up_kernel, norm_gemv_kernel
from evokernel.kernels.rows import (
    rows_gemv_kernel,
    rows_norm_kernel,
    rows_stream_kernel,
    rows_whole_k_kernel,
)


def next_pow2(n):
    return 1 << (n - 1).bit_length()


@functools.lru_cache(maxsize=16)
def sm_count(device):
    if device.type != "cuda":
        return 4  # the interpreter: few programs keep CPU runs fast
    return torch.cuda.get_device_properties(device).multi_processor_count


def gemv_block_n(N, K, itemsize, device, tuning, tiles=1):
    """Rows per one-row GEMV program: ~tile_bytes of weights (`tiles` tiles per row), a power
    of two, lowered until the programs fill one wave of SMs."""
    per_row = next_pow2(K) * itemsize * tiles
    block = max(1, min(next_pow2(N), tuning.tile_bytes // per_row))
    block = 1 << (block.bit_length() - 1)
    while block > 1 and triton.cdiv(N, block) < sm_count(device):
        block //= 2
    return block


def gemv_warps(block_n, block_k, tuning):
    if tuning.gemv_warps:
        return tuning.gemv_warps
    return 8 if block_n * block_k >= 16384 else 4


def rows_blocks(M, N, K, itemsize, device, tuning, tiles=1):
    """(BLOCK_M, BLOCK_N, BLOCK_K, SPLIT, warps) of the rows kernel (kernels/rows.py).

    Each program holds a [BLOCK_N, BLOCK_K] slab of the weights (`tiles` of them) in
    registers: BLOCK_K the widest power of two up to `tuning.rows_block_k` (and K) whose
    narrowest BLOCK_N fits `tuning.rows_tile_bytes`; BLOCK_N `tuning.rows_block_n`, or the
    widest of 64..narrowest that fits the bytes and fills one wave of SMs with the SPLIT =
    cdiv(K, BLOCK_K) slices of every column tile; where the narrowest still leaves SMs idle,
    K is split finer (down to 64). The narrowest BLOCK_N is 16, or 16 per warp with
    `rows_swap` (the weights are the MMA's row operand, 16 rows a warp). BLOCK_M: 16 up to
    `tuning.rows_block_m` as M needs, while x's tile stays within half the weights' budget.
    """
    warps = tuning.rows_warps
    narrow = 16 * warps if tuning.rows_swap else 16
    k_pow2 = max(64, next_pow2(K))  # four sub-slices of at least 16 (a dot's smallest K)
    block_k = max(64, min(k_pow2, tuning.rows_block_k, 2048))
    while block_k > 64 and narrow * block_k * itemsize * tiles > tuning.rows_tile_bytes:
        block_k //= 2
    sms = sm_count(device)
    block_n = tuning.rows_block_n or max(64, narrow)
    if not tuning.rows_block_n:
        while block_n > narrow and (
            triton.cdiv(N, block_n) * triton.cdiv(K, block_k) < sms
            or block_n * block_k * itemsize * tiles > tuning.rows_tile_bytes
        ):
            block_n //= 2
        while block_k > 64 and triton.cdiv(N, block_n) * triton.cdiv(K, block_k) < sms:
            block_k //= 2
    block_m = min(tuning.rows_block_m, max(16, next_pow2(M)))
    while block_m > 16 and block_m * block_k * itemsize > tuning.rows_tile_bytes // 2:
        block_m //= 2  # x's tile within half the weights' register budget
    return block_m, block_n, block_k, triton.cdiv(K, block_k), warps


@functools.lru_cache(maxsize=16)
def shared_limit(device):
    """Shared memory bytes one program may take (the opt-in limit); none in the interpreter."""
    if device.type != "cuda":
        return 1 << 30
    props = torch.cuda.get_device_properties(device)
    return props.shared_memory_per_block_optin  # type: ignore[attr-defined]  # not in the stubs


def rows_whole_k_blocks(M, K, itemsize, device, tuning, tiles=1):
    """(BLOCK_M, BLOCK_N, PARTS, KW, warps) of the whole-K rows kernel (kernels/rows.py), or
    None where `tuning` keeps these rows and this K on the split kernel (more than
    `rows_whole_k_rows` rows, K padded beyond `rows_whole_k`) or the program's operands would
    not fit the device's shared memory.

    BLOCK_N `tuning.rows_whole_k_n` (16: one MMA's rows) over `tiles` (gate_up: 8 gate and 8
    up rows, twice the programs of 16 columns, which measured faster); warps by the
    slab's bytes, 8 KB a warp (1..8); K padded to a power of two and cut into PARTS slices of
    `tuning.rows_part_k` (at least one a warp, each >= 16 wide). BLOCK_M: 8 up to
    `tuning.rows_block_m` as M needs, while x's tile stays within 256 bytes a thread. Both
    operands pass through shared memory on their way to the MMA.
    """
    k_pow2 = max(16, next_pow2(K))
    if tuning.rows_whole_k_rows < M or tuning.rows_whole_k < k_pow2:
        return None
    block_n = max(8, tuning.rows_whole_k_n // tiles)
    slab = block_n * k_pow2 * itemsize * tiles
    warps = min(8, max(1, next_pow2(max(1, slab // 8192))))
    parts = max(k_pow2 // min(tuning.rows_part_k, k_pow2), min(warps, k_pow2 // 16))
    block_m = min(tuning.rows_block_m, max(8, next_pow2(M)))
    while block_m > 8 and block_m * k_pow2 * itemsize > 256 * 32 * warps:
        block_m //= 2
    if slab + block_m * k_pow2 * itemsize > shared_limit(device):
        return None
    return block_m, block_n, parts, k_pow2 // parts, warps


def rows_stream_blocks(M, N, K, itemsize, device, tuning, tiles=1):
    """(BLOCK_M, BLOCK_N, BLOCK_K, K_PER, SPLIT, STAGES, PREFETCH, warps) of the streaming
    rows kernel (kernels/rows.py), or None where `tuning` keeps these rows on the split
    kernel (streaming off, or more than `rows_block_m` rows). BLOCK_N `stream_block_n`
    (gate_up: that many gate and up rows); K split in two while the programs stay within
    `stream_programs` (the SMs) and each keeps at least one chunk; K_PER a whole number of
    chunks; `stream_stages` stages, or as many as the device's shared memory holds (a stage:
    the weight and x chunks); PREFETCH `stream_prefetch` chunks asked of L2 (at most K_PER's,
    rounded up to a power of two). A deep op (K >= 2N: o_proj, down) from `stream_deep_rows`
    rows takes `stream_deep_n`, `stream_deep_k` and `stream_deep_programs` where they are set."""
    if not tuning.rows_stream or tuning.rows_block_m < M:
        return None
    deep = K >= 2 * N and tuning.stream_deep_rows <= M
    block_m = max(16, next_pow2(M))
    chunk = (deep and tuning.stream_deep_k) or tuning.stream_block_k
    block_k = max(16, min(chunk, next_pow2(K)))
    block_n = (deep and tuning.stream_deep_n) or tuning.stream_block_n
    tiles_n = triton.cdiv(N, block_n)
    programs = (deep and tuning.stream_deep_programs) or tuning.stream_programs
    target = programs or sm_count(device)
    split = 1
    while tiles_n * split * 2 <= target and triton.cdiv(K, split * 2) >= block_k:
        split *= 2
    k_per = triton.cdiv(triton.cdiv(K, split), block_k) * block_k
    split = triton.cdiv(K, k_per)
    stage = (tiles * block_n + block_m) * block_k * itemsize
    stages = max(1, min(tuning.stream_stages, (shared_limit(device) - 8192) // stage))
    chunks = min(tuning.stream_prefetch, k_per // block_k)
    prefetch = next_pow2(chunks) if chunks else 0  # the kernel masks past K_PER
    return block_m, block_n, block_k, k_per, split, stages, prefetch, tuning.stream_warps


def _rows_whole_k(x, norm_weight, weight, bias, out, residual, keys, eps, n_out, blocks, *,
                  norm, epilogue, write_logits, pdl):  # fmt: skip
    M, K = x.shape
    block_m, block_n, parts, kw, warps = blocks
    dummy = x  # pointer arguments a switch leaves unused
    rows_whole_k_kernel[(triton.cdiv(n_out, block_n),)](
        x, norm_weight if norm else dummy, weight, bias if bias is not None else dummy,
        out if out is not None else dummy, residual if residual is not None else dummy,
        keys if keys is not None else dummy, M, n_out, x.stride(0), weight.stride(0),
        out.stride(0) if out is not None else 0,
        residual.stride(0) if residual is not None else 0, eps,
        K=K, BLOCK_M=block_m, BLOCK_N=block_n, PARTS=parts, KW=kw, NORM=norm,
        HAS_BIAS=bias is not None, EPILOGUE=epilogue, WRITE_LOGITS=write_logits,
        ARGMAX=keys is not None, IEEE=x.dtype == torch.float32, PDL=pdl,
        num_warps=warps, launch_pdl=pdl,
    )  # fmt: skip


def _split_args(x, norm_weight, weight, bias, out, residual, keys, eps, n_out, n_tiles, split,
                tiles, norm):  # fmt: skip
    """The positional arguments of the rows kernels that may split K (kernels/rows.py
    `rows_gemv_kernel`, `rows_stream_kernel`), with the float32 partials and the kept zeroed
    tickets a split needs."""
    M = x.shape[0]
    dummy = x  # pointer arguments a switch leaves unused
    part, tickets = dummy, dummy
    if split > 1:
        part = torch.empty(split * tiles * M * n_out, device=x.device, dtype=torch.float32)
        tickets = kept_zeros("rows_tickets", x.device, n_tiles, torch.int32)
    return (
        x, norm_weight if norm else dummy, weight, bias if bias is not None else dummy,
        out if out is not None else dummy, residual if residual is not None else dummy,
        keys if keys is not None else dummy, part, tickets, M, n_out, x.stride(0),
        weight.stride(0), out.stride(0) if out is not None else 0,
        residual.stride(0) if residual is not None else 0, eps,
    )  # fmt: skip


def _rows_stream(x, norm_weight, weight, bias, out, residual, keys, eps, n_out, blocks,
                 tuning, *, norm, epilogue, write_logits):  # fmt: skip
    K = x.shape[1]
    block_m, block_n, block_k, k_per, split, stages, prefetch, warps = blocks
    n_tiles = triton.cdiv(n_out, block_n)
    args = _split_args(x, norm_weight, weight, bias, out, residual, keys, eps, n_out, n_tiles,
                       split, 2 if epilogue == 2 else 1, norm)  # fmt: skip
    rows_stream_kernel[(n_tiles, split)](
        *args, K=K, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, K_PER=k_per,
        SPLIT=split, STAGES=stages, PREFETCH=prefetch if x.is_cuda else 0,  # inline PTX
        NORM_K=max(16, min(next_pow2(K), 8192 // block_m)), NORM=norm,
        HAS_BIAS=bias is not None, EPILOGUE=epilogue, WRITE_LOGITS=write_logits,
        ARGMAX=keys is not None, IEEE=x.dtype == torch.float32, PDL=tuning.pdl,
        num_warps=warps, launch_pdl=tuning.pdl,
    )  # fmt: skip


def _rows_prenormed(x, norm_weight, eps, tuning):
    """x's rows RMS-normalised once (kernels/rows.py `rows_norm_kernel`), for a rows launch
    that then reads them as they are."""
    M, K = x.shape
    out = torch.empty_like(x)
    block_k = next_pow2(K)
    rows_norm_kernel[(M,)](
        x, norm_weight, out, x.stride(0), out.stride(0), eps, K=K, BLOCK_K=block_k,
        PDL=tuning.pdl, num_warps=min(max(block_k // 256, 1), 8), launch_pdl=tuning.pdl,
    )  # fmt: skip
    return out


def _rows(x, norm_weight, weight, bias, out, residual, keys, eps, n_out, tuning, *,
          norm, epilogue, write_logits=False):  # fmt: skip
    """One launch of the rows kernel (kernels/rows.py) with the given prologue and epilogue
    (the norm a launch of its own first where `tuning.rows_prenorm` says so)."""
    M, K = x.shape
    tiles = 2 if epilogue == 2 else 1
    size = weight.element_size()
    whole = rows_whole_k_blocks(M, K, size, x.device, tuning, tiles)
    stream = None if whole else rows_stream_blocks(M, n_out, K, size, x.device, tuning, tiles)
    if norm and (tuning.rows_prenorm == 2 or (tuning.rows_prenorm == 1 and epilogue == 3)):
        x = _rows_prenormed(x, norm_weight, eps, tuning)
        norm = False
    if whole is not None:
        _rows_whole_k(x, norm_weight, weight, bias, out, residual, keys, eps, n_out, whole,
                      norm=norm, epilogue=epilogue, write_logits=write_logits,
                      pdl=tuning.pdl)  # fmt: skip
        return
    if stream is not None:
        _rows_stream(x, norm_weight, weight, bias, out, residual, keys, eps, n_out, stream,
                     tuning, norm=norm, epilogue=epilogue, write_logits=write_logits)  # fmt: skip
        return
    block_m, block_n, block_k, split, warps = rows_blocks(
        M, n_out, K, size, x.device, tuning, tiles
    )
    n_tiles = triton.cdiv(n_out, block_n)
    args = _split_args(x, norm_weight, weight, bias, out, residual, keys, eps, n_out, n_tiles,
                       split, tiles, norm)  # fmt: skip
    rows_gemv_kernel[(n_tiles, split)](
        *args, K=K, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT=split, NORM=norm,
        HAS_BIAS=bias is not None, EPILOGUE=epilogue, WRITE_LOGITS=write_logits,
        ARGMAX=keys is not None, IEEE=x.dtype == torch.float32, SWAP=tuning.rows_swap,
        PDL=tuning.pdl, num_warps=warps, launch_pdl=tuning.pdl,
    )  # fmt: skip


def norm_linear(x, norm_weight, weight, bias, eps, tuning):
    N, K = weight.shape
    M = x.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    if tuning.rows_min <= M:
        _rows(x, norm_weight, weight, bias, y, None, None, eps, N, tuning, norm=True, epilogue=0)
        return y
    block_n, block_k = gemv_block_n(N, K, weight.element_size(), x.device, tuning), next_pow2(K)
    norm_gemv_kernel[(triton.cdiv(N, block_n),)](
        x, norm_weight, weight, bias if bias is not None else x, y, M, N, x.stride(0),
        weight.stride(0), y.stride(0), eps, K=K, BLOCK_M=M, BLOCK_N=block_n, BLOCK_K=block_k,
        NORM=True, HAS_BIAS=bias is not None, PDL=tuning.pdl,
        num_warps=gemv_warps(block_n, block_k, tuning), launch_pdl=tuning.pdl,
    )  # fmt: skip
    return y


def linear_residual(x, weight, residual, tuning):
    N, K = weight.shape
    M = x.shape[0]
    if tuning.rows_min <= M:
        _rows(x, x, weight, None, None, residual, None, 0.0, N, tuning, norm=False, epilogue=1)
        return residual
    block_n, block_k = gemv_block_n(N, K, weight.element_size(), x.device, tuning), next_pow2(K)
    gemv_add_kernel[(triton.cdiv(N, block_n),)](
        x, weight, residual, M, N, x.stride(0), weight.stride(0), residual.stride(0),
        K=K, BLOCK_M=M, BLOCK_N=block_n, BLOCK_K=block_k, PDL=tuning.pdl,
        num_warps=gemv_warps(block_n, block_k, tuning), launch_pdl=tuning.pdl,
    )  # fmt: skip
    return residual


def norm_gate_up_silu(x, norm_weight, gate_up, eps, tuning):
    two_i, K = gate_up.shape
    M, inter = x.shape[0], two_i // 2
    act = torch.empty((M, inter), device=x.device, dtype=x.dtype)
    if tuning.rows_min <= M:
        _rows(x, norm_weight, gate_up, None, act, None, None, eps, inter, tuning, norm=True,
              epilogue=2)  # fmt: skip
        return act
    block_n = gemv_block_n(inter, K, gate_up.element_size(), x.device, tuning, tiles=2)
    block_k = next_pow2(K)
    norm_gate_up_kernel[(triton.cdiv(inter, block_n),)](
        x, norm_weight, gate_up, act, M, inter, x.stride(0), gate_up.stride(0), act.stride(0),
        eps, K=K, BLOCK_M=M, BLOCK_N=block_n, BLOCK_K=block_k, PDL=tuning.pdl,
        num_warps=gemv_warps(2 * block_n, block_k, tuning), launch_pdl=tuning.pdl,
    )  # fmt: skip
    return act


_KEPT: dict = {}  # (purpose, device type, index) -> buffers handed out, in order


def kept_zeros(purpose, device, n, dtype):
    """At least `n` zeros of `dtype` on `device` for `purpose`, which every launch that uses
    them leaves zero again. Every buffer handed out stays alive for the process's life: a
    captured CUDA graph holds its address. A larger request allocates a larger buffer
    (outside graph capture, do it once eagerly first, as warm-up does). Two launches sharing
    a buffer must not run concurrently."""
    index = device.index
    if device.type == "cuda" and index is None:
        index = torch.cuda.current_device()
    kept = _KEPT.setdefault((purpose, device.type, index), [])
    if not kept or kept[-1].numel() < n:
        kept.append(torch.zeros(max(n, 256), dtype=dtype, device=device))
    return kept[-1]


def attention_split(max_len, programs_per_split, device, tuning):
    """Chunks per sequence for a bound `max_len` on seq_lens: 1 up to `tuning.direct_max` (one
    pass); beyond, chunks of at least `min_chunk` positions, their count rounded up to a power
    of two (so that a chunk is one tile where the programs allow) but at most
    `attn_programs_per_sm` programs per SM in all (programs_per_split = B * Hkv) and
    `max_split`. The chunk size follows each sequence's own length at run time, so short
    sequences under a long bound leave trailing chunks empty."""
    if max_len <= tuning.direct_max:
        return 1
    want = next_pow2(triton.cdiv(max_len, tuning.min_chunk))
    cap = max(1, tuning.attn_programs_per_sm * sm_count(device) // max(1, programs_per_split))
    cap = 1 << (min(cap, tuning.max_split).bit_length() - 1)
    return min(want, cap)


def attention(q, q_norm, k_norm, cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps,
              max_len, hq, stride_qb, stride_qh, fused, tuning, split):  # fmt: skip
    B = seq_lens.shape[0]
    hkv, S, D = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    group = hq // hkv
    bound = min(max_len, S)
    out = torch.empty((B, hq, D), device=q.device, dtype=q.dtype)
    if split is None:
        split = attention_split(bound, B * hkv, q.device, tuning)
    ticket = split > 1 and tuning.ticket_combine
    mma = tuning.attention_mma(bound)
    if split == 1:
        part = lse = out
    else:
        part = torch.empty((B * hq, split, D), device=q.device, dtype=torch.float32)
        lse = torch.empty((B * hq, split), device=q.device, dtype=torch.float32)
    tickets = kept_zeros("tickets", q.device, B * hkv, torch.int32) if ticket else lse
    qk_norm = fused and q_norm is not None
    attention_kernel[(B * hkv, split)](
        q, q_norm if qk_norm else q, k_norm if qk_norm else q, cos, sin, positions, seq_lens,
        k_cache, v_cache, out, part, lse, tickets, scale, eps, split, hkv, S,
        cos.shape[0] if fused else 0, stride_qb, stride_qh,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1),
        GROUP=group, D=D, BLOCK_G=max(16, next_pow2(group)) if mma else next_pow2(group),
        BLOCK_N=tuning.attention_block_n(bound), FUSED=fused, QK_NORM=qk_norm,
        DIRECT=split == 1, TICKET=ticket, BLOCK_S=next_pow2(split), BLOCK_R=next_pow2(group),
        IEEE=q.dtype == torch.float32, MMA=mma, PDL=tuning.pdl,
        num_warps=tuning.attention_warps(bound), launch_pdl=tuning.pdl,
    )  # fmt: skip
    if split > 1 and not ticket:
        attention_combine_kernel[(B * hq,)](
            part, lse, out, hq, split, out.stride(0), out.stride(1),
            D=D, BLOCK_S=next_pow2(split), PDL=tuning.pdl, num_warps=tuning.combine_warps,
            launch_pdl=tuning.pdl,
        )  # fmt: skip
    return out.view(B, hq * D)
