"""Batched decode GEMV on tensor cores: a batch of rows times a weight matrix, with the decode
kernels' prologues and epilogues fused (kernels/gemv.py does one row at a time on the CUDA
cores, which at B = 1 is the shorter path).

At batch B > 1 a step still reads every weight once, but the CUDA-core kernels redo each
weight tile's products row after row, each row's activations one L2 round trip after the
last. Here program (n, s) owns output columns [n*BLOCK_N, +BLOCK_N) and the K slice
[s*BLOCK_K, +BLOCK_K): its weight slab [BLOCK_N, BLOCK_K] is loaded once, before the PDL wait
(as the one-row kernels do), and kept in registers while the program walks the batch's rows
in tiles of BLOCK_M (>= 16, rows past M masked to zero), each tile's x slice one load,
normalised in registers, one tensor-core dot in float32. Weights are read once whatever the
batch. A dot of a 16 x 16 output tile is one warp's chain of MMAs, one per 16 of K, each
waiting for the last: so the slab is cut into four sub-slices whose dots are independent
chains the warp interleaves (a quarter of the latency), then summed.

  SPLIT == 1  (the whole K in one slab) the program applies the epilogue itself.
  SPLIT > 1   (K split so that narrow N still fills the SMs) each program stores its float32
              partial in part[s], then takes a ticket (an atomic add on ticket[n],
              acquire-release at GPU scope, after a block barrier); the one that draws the
              last resets the counter to 0, sums the SPLIT partials in slice order (the same
              order whichever finishes last) and applies the epilogue. With NORM each program
              first sums the squares of its rows' whole K (x is small and L2-hot).

  NORM       x rows RMS-normalised first, rounded as transformers rounds (to the dtype before
             and after the norm weight)
  HAS_BIAS   + bias before the output's rounding (as cuBLAS's epilogue adds it)
  EPILOGUE   0: out = round(acc)                              (qkv)
             1: res = round(res + round(acc)), in place       (o_proj, down_proj)
             2: out = round(round(silu(round(acc_g))) * round(acc_u)), W = [gate rows; up
                rows], N = I                                   (gate_up + SiLU-mul)
             3: the head: logits round(acc) as float32 (WRITE_LOGITS) and/or each row's
                max/argmax over this program's columns folded into its int64 key by an atomic
                max (ARGMAX, kernels/gemv.py `argmax_key`)

`rows_whole_k_kernel` is the same product without the cross-program merge: program n owns
output columns [n*BLOCK_N, +BLOCK_N) over the whole of K, its slab cut into PARTS slices of
KW along K that one batched dot takes as its batch dimension (Triton puts a 3-D dot's warps
on that dimension: each warp multiplies its own slices, none repeats another's). The parts'
products are summed in registers and shared memory (a block reduction, not partials in
global memory and a ticket). With whole rows of x in the program, NORM costs no second pass:
the squares are summed from the tile that feeds the dot.

`rows_stream_kernel` streams the weights instead of holding a slab: program (n, s) walks its
K range [s*K_PER, +K_PER) in chunks of BLOCK_K, software-pipelined over STAGES chunks (the
weight chunk and the rows' x chunk land in shared memory while earlier chunks multiply), and
accumulates [BLOCK_N, BLOCK_M] on tensor cores (the weights the MMA's row operand). A program
holds little, so a slab's register budget no longer sets how much of W one program reads:
wider column tiles, fewer programs, and at 16-64 rows each weight chunk's product is one
MMA chain over the whole row tile. SPLIT > 1 merges as the split kernel does (tickets).
PREFETCH asks L2 for the program's first chunks before the PDL wait, so they arrive while
the previous kernel runs, as the slab kernels' weights do (two by default: asking for all
of them measured slower). With NORM each program sums the squares of its rows first, in
unrolled loads of NORM_K columns.

Results equal the one-row kernels' up to float32 summation order (the dot's).
"""

import triton
import triton.language as tl

from evokernel.kernels.gemv import argmax_key
from evokernel.kernels.norm import _store_normed
from evokernel.kernels.overlap import pdl_enter


@triton.jit
def _chunk(w_ptr, cols_n, N, stride_w, ks, K: tl.constexpr):
    """W[cols_n, ks] as a [BLOCK_N, BLOCK_K] tile (0 where masked), read once: evict_first."""
    ptrs = w_ptr + cols_n[:, None].to(tl.int64) * stride_w + ks[None, :]
    mask = (cols_n[:, None] < N) & (ks[None, :] < K)
    return tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")


@triton.jit
def _x_tile(x_ptr, rows_m, M, stride_x, ks, K: tl.constexpr):
    mask = (rows_m[:, None] < M) & (ks[None, :] < K)
    return tl.load(x_ptr + rows_m[:, None].to(tl.int64) * stride_x + ks[None, :], mask=mask,
                   other=0.0)  # fmt: skip


@triton.jit
def _normed(x, norm_ptr, rstd, ks, K: tl.constexpr, NORM: tl.constexpr):
    """x [BLOCK_M, BLOCK_K] in the dtype, normalised (NORM) as transformers rounds."""
    if NORM:
        dtype = x.dtype
        w = tl.load(norm_ptr + ks, mask=ks < K, other=0.0).to(tl.float32)
        x = (x.to(tl.float32) * rstd[:, None]).to(dtype).to(tl.float32) * w[None, :]
        x = x.to(dtype)
    return x


@triton.jit
def _mma(a, b, IEEE: tl.constexpr):
    """a @ b in float32 (2-D, or 3-D batched over the first dimension); IEEE for float32
    inputs (no TF32)."""
    if IEEE:
        out = tl.dot(a, b, input_precision="ieee")
    else:
        out = tl.dot(a, b)
    return out


@triton.jit
def _slice_dot(x, w, IEEE: tl.constexpr, SWAP: tl.constexpr):
    """x [BM, BK] @ w [BN, BK]^T in float32; SWAP: its transpose w @ x^T [BN, BM], the weights
    the MMA's row operand, so the BLOCK_N rows spread over the warps (16 each)."""
    if SWAP:
        out = _mma(w, tl.trans(x), IEEE)
    else:
        out = _mma(x, tl.trans(w), IEEE)
    return out


@triton.jit
def _w4(w_ptr, cols_n, N, stride_w, k0, KS: tl.constexpr, K: tl.constexpr):
    """The four KS-wide slices of W[cols_n, k0 : k0 + 4 KS]."""
    offs = k0 + tl.arange(0, KS)
    a = _chunk(w_ptr, cols_n, N, stride_w, offs, K)
    b = _chunk(w_ptr, cols_n, N, stride_w, offs + KS, K)
    c = _chunk(w_ptr, cols_n, N, stride_w, offs + 2 * KS, K)
    d = _chunk(w_ptr, cols_n, N, stride_w, offs + 3 * KS, K)
    return a, b, c, d


@triton.jit
def _x4(x_ptr, rows_m, M, stride_x, k0, KS: tl.constexpr, K: tl.constexpr):
    """The four KS-wide slices of x[rows_m, k0 : k0 + 4 KS], in the dtype."""
    offs = k0 + tl.arange(0, KS)
    a = _x_tile(x_ptr, rows_m, M, stride_x, offs, K)
    b = _x_tile(x_ptr, rows_m, M, stride_x, offs + KS, K)
    c = _x_tile(x_ptr, rows_m, M, stride_x, offs + 2 * KS, K)
    d = _x_tile(x_ptr, rows_m, M, stride_x, offs + 3 * KS, K)
    return a, b, c, d


@triton.jit
def _sumsq(a, b, c, d):
    a = a.to(tl.float32)
    b = b.to(tl.float32)
    c = c.to(tl.float32)
    d = d.to(tl.float32)
    return (
        tl.sum(a * a, axis=1)
        + tl.sum(b * b, axis=1)
        + tl.sum(c * c, axis=1)
        + tl.sum(d * d, axis=1)
    )


@triton.jit
def _dot4(
    xa, xb, xc, xd, wa, wb, wc, wd, norm_ptr, rstd, k0, KS: tl.constexpr, K: tl.constexpr,
    NORM: tl.constexpr, IEEE: tl.constexpr, SWAP: tl.constexpr,
):  # fmt: skip
    """sum over the four slices of normed(x_s) @ w_s^T [BM, BN]: four independent MMA
    chains (SWAP: summed as [BN, BM], transposed once)."""
    offs = k0 + tl.arange(0, KS)
    pa = _slice_dot(_normed(xa, norm_ptr, rstd, offs, K, NORM), wa, IEEE, SWAP)
    pb = _slice_dot(_normed(xb, norm_ptr, rstd, offs + KS, K, NORM), wb, IEEE, SWAP)
    pc = _slice_dot(_normed(xc, norm_ptr, rstd, offs + 2 * KS, K, NORM), wc, IEEE, SWAP)
    pd = _slice_dot(_normed(xd, norm_ptr, rstd, offs + 3 * KS, K, NORM), wd, IEEE, SWAP)
    acc = (pa + pb) + (pc + pd)
    if SWAP:
        acc = tl.trans(acc)
    return acc


@triton.jit
def _epilogue(
    acc, acc_u, rows_m, cols_n, col0, M, N, bias, out_ptr, res_ptr, key_ptr, stride_out,
    stride_res, dtype: tl.constexpr, HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr,
    WRITE_LOGITS: tl.constexpr, ARGMAX: tl.constexpr,
):  # fmt: skip
    live = (rows_m[:, None] < M) & (cols_n[None, :] < N)
    if HAS_BIAS:
        acc += bias[None, :]
    y = acc.to(dtype).to(tl.float32)
    if EPILOGUE == 0:
        dst = out_ptr + rows_m[:, None].to(tl.int64) * stride_out + cols_n[None, :]
        tl.store(dst, y.to(dtype), mask=live)
    elif EPILOGUE == 1:
        dst = res_ptr + rows_m[:, None].to(tl.int64) * stride_res + cols_n[None, :]
        r = tl.load(dst, mask=live, other=0.0).to(tl.float32)
        tl.store(dst, (r + y).to(dtype), mask=live)
    elif EPILOGUE == 2:
        u = acc_u.to(dtype).to(tl.float32)
        s = (y / (1.0 + tl.exp(-y))).to(dtype).to(tl.float32)
        dst = out_ptr + rows_m[:, None].to(tl.int64) * stride_out + cols_n[None, :]
        tl.store(dst, (s * u).to(dtype), mask=live)
    else:
        if WRITE_LOGITS:
            dst = out_ptr + rows_m[:, None].to(tl.int64) * stride_out + cols_n[None, :]
            tl.store(dst, y, mask=live)
        if ARGMAX:
            y = tl.where(live, y, -float("inf"))
            best, arg = tl.max(y, axis=1, return_indices=True, return_indices_tie_break_left=True)
            key = argmax_key(best, col0 + arg)
            tl.atomic_max(key_ptr + rows_m, key, mask=rows_m < M, sem="relaxed", scope="gpu")


@triton.jit
def _partial_ptrs(part_ptr, s, rows_m, cols_n, M, N, TILES: tl.constexpr):
    """Split s's float32 partial [rows_m, cols_n] in part [SPLIT, TILES, M, N] (fewer than
    2**31 elements: the launcher's rule)."""
    return part_ptr + s * TILES * M * N + rows_m[:, None] * N + cols_n[None, :]


@triton.jit
def _tile_end(
    acc, acc_u, s, rows_m, cols_n, col0, M, N, bias, out_ptr, res_ptr, key_ptr, part_ptr,
    stride_out, stride_res, dtype: tl.constexpr, SPLIT: tl.constexpr, TILES: tl.constexpr,
    HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr, WRITE_LOGITS: tl.constexpr,
    ARGMAX: tl.constexpr,
):  # fmt: skip
    """A split kernel's [rows_m, cols_n] tile of products (acc; acc_u the up rows'): the
    epilogue where the program has the whole K (SPLIT == 1), else its float32 partials stored
    in part[s] for `_split_merge`."""
    if SPLIT == 1:
        _epilogue(acc, acc_u, rows_m, cols_n, col0, M, N, bias, out_ptr, res_ptr, key_ptr,
                  stride_out, stride_res, dtype, HAS_BIAS, EPILOGUE, WRITE_LOGITS,
                  ARGMAX)  # fmt: skip
    else:
        live = (rows_m[:, None] < M) & (cols_n[None, :] < N)
        dst = _partial_ptrs(part_ptr, s, rows_m, cols_n, M, N, TILES)
        tl.store(dst, acc, mask=live)
        if EPILOGUE == 2:
            tl.store(dst + M * N, acc_u, mask=live)


@triton.jit
def rows_gemv_kernel(
    x_ptr,  # [M, K]
    norm_ptr,  # [K] (NORM)
    w_ptr,  # [N, K]; EPILOGUE 2: [2N, K], gate rows then up rows
    bias_ptr,  # [N] (HAS_BIAS)
    out_ptr,  # [M, N] (EPILOGUE 0, 2), logits [M, N] float32 (EPILOGUE 3, WRITE_LOGITS)
    res_ptr,  # [M, N] the residual stream, updated in place (EPILOGUE 1)
    key_ptr,  # [M] int64 argmax keys (EPILOGUE 3, ARGMAX)
    part_ptr,  # [SPLIT, TILES, M, N] float32 partials (SPLIT > 1)
    ticket_ptr,  # [cdiv(N, BLOCK_N)] int32 counters, 0 at launch and after it (SPLIT > 1)
    M,
    N,
    stride_x,
    stride_w,
    stride_out,
    stride_res,
    eps,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,  # the K slice a program holds (a power of two, four sub-slices)
    SPLIT: tl.constexpr,  # cdiv(K, BLOCK_K): programs per column tile
    NORM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    EPILOGUE: tl.constexpr,
    WRITE_LOGITS: tl.constexpr,
    ARGMAX: tl.constexpr,
    IEEE: tl.constexpr,
    SWAP: tl.constexpr,
    PDL: tl.constexpr,
):
    pid_n = tl.program_id(0)
    s = tl.program_id(1)
    col0 = pid_n * BLOCK_N
    cols_n = col0 + tl.arange(0, BLOCK_N)
    k0 = s * BLOCK_K
    KS: tl.constexpr = BLOCK_K // 4  # a slab is four independent sub-slices
    TILES: tl.constexpr = 2 if EPILOGUE == 2 else 1
    up_ptr = w_ptr + N * stride_w  # EPILOGUE 2: the up rows (2N * K < 2**31 elements)
    dtype = x_ptr.dtype.element_ty
    wa, wb, wc, wd = _w4(w_ptr, cols_n, N, stride_w, k0, KS, K)
    ua, ub, uc, ud = wa, wb, wc, wd
    if EPILOGUE == 2:
        ua, ub, uc, ud = _w4(up_ptr, cols_n, N, stride_w, k0, KS, K)
    bias = tl.zeros([BLOCK_N], tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + cols_n, mask=cols_n < N, other=0.0).to(tl.float32)
    pdl_enter(PDL)

    # Not software-pipelined: prefetching the next row tile's x would hold stages of it in
    # shared memory and cut the programs an SM can hold (at M <= 16 there is no next tile).
    rows_m0 = tl.arange(0, BLOCK_M)
    for m0 in tl.range(0, M, BLOCK_M, num_stages=1):
        rows_m = m0 + rows_m0
        xa, xb, xc, xd = _x4(x_ptr, rows_m, M, stride_x, k0, KS, K)
        rstd = tl.zeros([BLOCK_M], tl.float32)
        if NORM:
            if SPLIT == 1:
                ss = _sumsq(xa, xb, xc, xd)
            else:  # the row's whole K, slab by slab (x is small and L2-hot)
                ss = tl.zeros([BLOCK_M], tl.float32)
                for c in tl.range(0, K, BLOCK_K, num_stages=1):
                    ya, yb, yc, yd = _x4(x_ptr, rows_m, M, stride_x, c, KS, K)
                    ss += _sumsq(ya, yb, yc, yd)
            rstd = tl.rsqrt(ss / K + eps)
        acc = _dot4(xa, xb, xc, xd, wa, wb, wc, wd, norm_ptr, rstd, k0, KS, K, NORM, IEEE,
                    SWAP)  # fmt: skip
        acc_u = acc
        if EPILOGUE == 2:
            acc_u = _dot4(xa, xb, xc, xd, ua, ub, uc, ud, norm_ptr, rstd, k0, KS, K, NORM,
                          IEEE, SWAP)  # fmt: skip
        _tile_end(acc, acc_u, s, rows_m, cols_n, col0, M, N, bias, out_ptr, res_ptr, key_ptr,
                  part_ptr, stride_out, stride_res, dtype, SPLIT, TILES, HAS_BIAS, EPILOGUE,
                  WRITE_LOGITS, ARGMAX)  # fmt: skip

    if SPLIT > 1:
        _split_merge(part_ptr, ticket_ptr, pid_n, rows_m0, cols_n, col0, M, N, bias, out_ptr,
                     res_ptr, key_ptr, stride_out, stride_res, dtype, BLOCK_M, BLOCK_N, SPLIT,
                     TILES, HAS_BIAS, EPILOGUE, WRITE_LOGITS, ARGMAX)  # fmt: skip


@triton.jit
def _split_merge(
    part_ptr, ticket_ptr, pid_n, rows_m0, cols_n, col0, M, N, bias, out_ptr, res_ptr, key_ptr,
    stride_out, stride_res, dtype: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr, TILES: tl.constexpr, HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr,
    WRITE_LOGITS: tl.constexpr, ARGMAX: tl.constexpr,
):  # fmt: skip
    """A split program's end, its partials stored: it takes a ticket (an atomic add on
    ticket[pid_n], acquire-release at GPU scope, after a block barrier); the one that draws the
    last resets the counter to 0, sums the SPLIT partials in slice order (the same order
    whichever finishes last) and applies the epilogue."""
    tl.debug_barrier()  # every thread's partials stored before the ticket is taken
    ticket = tl.atomic_add(ticket_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
    if ticket == SPLIT - 1:
        tl.store(ticket_ptr + pid_n, 0)
        for m0 in tl.range(0, M, BLOCK_M, num_stages=1):
            rows_m = m0 + rows_m0
            live = (rows_m[:, None] < M) & (cols_n[None, :] < N)
            acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            acc_u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            for t in tl.static_range(SPLIT):  # unrolled: every partial's load in flight
                src = _partial_ptrs(part_ptr, t, rows_m, cols_n, M, N, TILES)
                acc += tl.load(src, mask=live, other=0.0, cache_modifier=".cg")
                if EPILOGUE == 2:
                    acc_u += tl.load(src + M * N, mask=live, other=0.0, cache_modifier=".cg")
            _epilogue(acc, acc_u, rows_m, cols_n, col0, M, N, bias, out_ptr, res_ptr, key_ptr,
                      stride_out, stride_res, dtype, HAS_BIAS, EPILOGUE, WRITE_LOGITS,
                      ARGMAX)  # fmt: skip


@triton.jit
def rows_norm_kernel(
    x_ptr,  # [M, K]
    w_ptr,  # [K]
    out_ptr,  # [M, K]: round(round(x * rstd(x)) * w), as transformers rounds
    stride_x,
    stride_out,
    eps,
    K: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):
    """One row's RMS norm ahead of the rows kernel (`rows_prenorm`): the batch's rows are
    normalised once, not once per program of the GEMV that reads them (kernels/norm.py's
    rounding, behind the PDL wait)."""
    row = tl.program_id(0).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    mask = ks < K
    pdl_enter(PDL)
    x = tl.load(x_ptr + row * stride_x + ks, mask=mask, other=0.0).to(tl.float32)
    _store_normed(x, w_ptr, out_ptr + row * stride_out, ks, mask, K, eps)


@triton.jit
def rows_whole_k_kernel(
    x_ptr,  # [M, K]
    norm_ptr,  # [K] (NORM)
    w_ptr,  # [N, K]; EPILOGUE 2: [2N, K], gate rows then up rows
    bias_ptr,  # [N] (HAS_BIAS)
    out_ptr,  # as rows_gemv_kernel's
    res_ptr,
    key_ptr,
    M,
    N,
    stride_x,
    stride_w,
    stride_out,
    stride_res,
    eps,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PARTS: tl.constexpr,  # K slices (a power of two): the batched dot's batch dimension
    KW: tl.constexpr,  # each slice's width: PARTS * KW >= K
    NORM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    EPILOGUE: tl.constexpr,
    WRITE_LOGITS: tl.constexpr,
    ARGMAX: tl.constexpr,
    IEEE: tl.constexpr,
    PDL: tl.constexpr,
):
    pid = tl.program_id(0)
    col0 = pid * BLOCK_N
    cols_n = col0 + tl.arange(0, BLOCK_N)
    part = tl.arange(0, PARTS)
    kk = tl.arange(0, KW)
    dtype = x_ptr.dtype.element_ty
    # The slab as [PARTS, BLOCK_N, KW]: part p holds K columns [p*KW, +KW).
    k_w = part[:, None, None] * KW + kk[None, None, :]
    w_mask = (cols_n[None, :, None] < N) & (k_w < K)
    w_offs = cols_n[None, :, None].to(tl.int64) * stride_w + k_w
    w = tl.load(w_ptr + w_offs, mask=w_mask, other=0.0, eviction_policy="evict_first")
    u = w
    if EPILOGUE == 2:  # the up rows (2N * K < 2**31 elements)
        u = tl.load(w_ptr + N * stride_w + w_offs, mask=w_mask, other=0.0,
                    eviction_policy="evict_first")  # fmt: skip
    bias = tl.zeros([BLOCK_N], tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + cols_n, mask=cols_n < N, other=0.0).to(tl.float32)
    # x^T as [PARTS, KW, BLOCK_M], the dot's other operand; the norm weight likewise.
    k_x = part[:, None, None] * KW + kk[None, :, None]
    norm_w = tl.zeros([PARTS, KW, 1], tl.float32)
    if NORM:
        norm_w = tl.load(norm_ptr + k_x, mask=k_x < K, other=0.0).to(tl.float32)
    pdl_enter(PDL)

    for m0 in tl.range(0, M, BLOCK_M, num_stages=1):
        rows_m = m0 + tl.arange(0, BLOCK_M)
        x_mask = (k_x < K) & (rows_m[None, None, :] < M)
        x = tl.load(x_ptr + rows_m[None, None, :].to(tl.int64) * stride_x + k_x, mask=x_mask,
                    other=0.0)  # fmt: skip
        if NORM:  # as transformers rounds: to the dtype before and after the weight
            xf = x.to(tl.float32)
            rstd = tl.rsqrt(tl.sum(tl.sum(xf * xf, axis=1), axis=0) / K + eps)
            x = ((xf * rstd[None, None, :]).to(dtype).to(tl.float32) * norm_w).to(dtype)
        acc = tl.trans(tl.sum(_mma(w, x, IEEE), axis=0))
        acc_u = acc
        if EPILOGUE == 2:
            acc_u = tl.trans(tl.sum(_mma(u, x, IEEE), axis=0))
        _epilogue(acc, acc_u, rows_m, cols_n, col0, M, N, bias, out_ptr, res_ptr, key_ptr,
                  stride_out, stride_res, dtype, HAS_BIAS, EPILOGUE, WRITE_LOGITS,
                  ARGMAX)  # fmt: skip


@triton.jit
def _prefetch_l2(w_ptr, cols_n, N, stride_w, k0, k_end, KP: tl.constexpr, K: tl.constexpr):
    """Ask L2 for W[cols_n, k0 : min(k0 + KP, k_end)], one request per 128-byte line (no
    registers written): issued before the PDL wait, the first chunks of a program's weights
    arrive while the previous kernel still runs."""
    LINE: tl.constexpr = 1024 // w_ptr.dtype.element_ty.primitive_bitwidth  # elements a line
    ks = k0 + tl.arange(0, KP // LINE) * LINE
    ptrs = w_ptr + cols_n[:, None].to(tl.int64) * stride_w + ks[None, :]
    live = (cols_n[:, None] < N) & (ks[None, :] < K) & (ks[None, :] < k_end)
    ptrs = tl.where(live, ptrs, w_ptr)
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];", "=r,l", [ptrs],
                              dtype=tl.int32, is_pure=False, pack=1)  # fmt: skip


@triton.jit
def _mma_acc(a, b, acc, IEEE: tl.constexpr):
    """acc + a @ b in float32; IEEE for float32 inputs (no TF32)."""
    if IEEE:
        acc = tl.dot(a, b, acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def rows_stream_kernel(
    x_ptr,  # [M, K]
    norm_ptr,  # [K] (NORM)
    w_ptr,  # [N, K]; EPILOGUE 2: [2N, K], gate rows then up rows
    bias_ptr,  # [N] (HAS_BIAS)
    out_ptr,  # as rows_gemv_kernel's
    res_ptr,
    key_ptr,
    part_ptr,  # [SPLIT, TILES, M, N] float32 partials (SPLIT > 1)
    ticket_ptr,  # [cdiv(N, BLOCK_N)] int32 counters, 0 at launch and after it (SPLIT > 1)
    M,
    N,
    stride_x,
    stride_w,
    stride_out,
    stride_res,
    eps,
    K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,  # the K chunk of one pipeline stage
    K_PER: tl.constexpr,  # K a program covers (a multiple of BLOCK_K; SPLIT * K_PER >= K)
    SPLIT: tl.constexpr,
    STAGES: tl.constexpr,  # chunks in flight (software pipelining through shared memory)
    PREFETCH: tl.constexpr,  # chunks asked of L2 before the PDL wait (a power of two, or 0)
    NORM_K: tl.constexpr,  # NORM: the K of each x load summing the rows' squares
    NORM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    EPILOGUE: tl.constexpr,
    WRITE_LOGITS: tl.constexpr,
    ARGMAX: tl.constexpr,
    IEEE: tl.constexpr,
    PDL: tl.constexpr,
):
    pid_n = tl.program_id(0)
    s = tl.program_id(1)
    col0 = pid_n * BLOCK_N
    cols_n = col0 + tl.arange(0, BLOCK_N)
    k_lo = s * K_PER
    TILES: tl.constexpr = 2 if EPILOGUE == 2 else 1
    up_ptr = w_ptr + N * stride_w  # EPILOGUE 2: the up rows (2N * K < 2**31 elements)
    dtype = x_ptr.dtype.element_ty
    bias = tl.zeros([BLOCK_N], tl.float32)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + cols_n, mask=cols_n < N, other=0.0).to(tl.float32)
    if PREFETCH > 0:
        _prefetch_l2(w_ptr, cols_n, N, stride_w, k_lo, k_lo + K_PER, PREFETCH * BLOCK_K, K)
        if EPILOGUE == 2:
            _prefetch_l2(up_ptr, cols_n, N, stride_w, k_lo, k_lo + K_PER, PREFETCH * BLOCK_K, K)
    pdl_enter(PDL)

    rows_m = tl.arange(0, BLOCK_M)  # every row: the launcher's BLOCK_M >= M
    rstd = tl.zeros([BLOCK_M], tl.float32)
    if NORM:  # the rows' whole K first (x is small and L2-hot), unrolled: loads overlap
        ss = tl.zeros([BLOCK_M], tl.float32)
        for c in tl.static_range(0, K, NORM_K):
            xs = _x_tile(x_ptr, rows_m, M, stride_x, c + tl.arange(0, NORM_K), K)
            xs = xs.to(tl.float32)
            ss += tl.sum(xs * xs, axis=1)
        rstd = tl.rsqrt(ss / K + eps)
    acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    acc_u = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    for k in tl.range(k_lo, k_lo + K_PER, BLOCK_K, num_stages=STAGES):
        ks = k + tl.arange(0, BLOCK_K)
        xt = tl.trans(_normed(_x_tile(x_ptr, rows_m, M, stride_x, ks, K), norm_ptr, rstd,
                              ks, K, NORM))  # fmt: skip
        acc = _mma_acc(_chunk(w_ptr, cols_n, N, stride_w, ks, K), xt, acc, IEEE)
        if EPILOGUE == 2:
            acc_u = _mma_acc(_chunk(up_ptr, cols_n, N, stride_w, ks, K), xt, acc_u, IEEE)
    _tile_end(tl.trans(acc), tl.trans(acc_u), s, rows_m, cols_n, col0, M, N, bias, out_ptr,
              res_ptr, key_ptr, part_ptr, stride_out, stride_res, dtype, SPLIT, TILES, HAS_BIAS,
              EPILOGUE, WRITE_LOGITS, ARGMAX)  # fmt: skip

    if SPLIT > 1:
        _split_merge(part_ptr, ticket_ptr, pid_n, rows_m, cols_n, col0, M, N, bias, out_ptr,
                     res_ptr, key_ptr, stride_out, stride_res, dtype, BLOCK_M, BLOCK_N, SPLIT,
                     TILES, HAS_BIAS, EPILOGUE, WRITE_LOGITS, ARGMAX)  # fmt: skip
