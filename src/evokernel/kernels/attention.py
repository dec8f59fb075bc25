"""Split-KV GQA decode attention (flash-decoding), optionally fused with the q/k prep.

Grid (B * Hkv, SPLIT). Program (b, j, s) serves kv head j of sequence b and *all* GROUP =
Hq / Hkv query heads that share it, so each K/V row is read once per step, not once per query
head. It walks the s-th chunk of the valid positions [0, seq_lens[b]) (chunks are equal, a
multiple of BLOCK_N, trailing ones may be empty) in BLOCK_N-row tiles with an online softmax in
float32 (base-2 exponentials). With MMA the GROUP query rows are padded to BLOCK_G >= 16 so
that the score and value products run as tensor-core dots; without, they run on the CUDA
cores (BLOCK_G >= GROUP, a power of two), which at short context is the shorter chain after
the PDL wait (no operand layout conversions). Positions at or past seq_lens[b] are never read.

  * SPLIT == 1 (DIRECT): the program normalises and writes out[b, h, :] itself.
  * SPLIT > 1: it writes its normalised partial [D] and log2-sum-exp per query head, merged
    either by `attention_combine_kernel` (grid (B * Hq,)), a second launch, or, with TICKET,
    in this launch by the last of the (b, j) programs to finish: each program with a
    non-empty chunk, after its partials are stored, takes a ticket (an atomic add on
    ticket[b * Hkv + j], acquire-release at GPU scope, after a block barrier); the one that
    draws the last ticket resets the counter to 0 and merges the chunks' partials (read
    through L2, never a stale L1 line). When the sequence fits one chunk
    (seq_lens[b] <= chunk), chunk 0 writes out directly and nobody takes a ticket. The
    counters must be 0 at launch and are 0 again after it; two launches sharing them must
    not run concurrently.

With FUSED the program also does what `qk_norm_rope_append` does for the decoded token: it
reads q and k of its heads from the packed qkv projection [B, (Hq + 2 Hkv) * D], applies the
per-head RMSNorm (QK_NORM: the families that have it, qwen3) and RoPE at position
positions[b], and the program whose chunk holds that position writes K and V to the cache.
That program counts the new row apart, from registers (its score and value start the online
softmax), and every tile skips the cache row at that position, so no program reads what
another program of this launch writes. Without FUSED, q [B, Hq, D] is already normalised and
rotated, and the cache is only read.

The first K/V tile is loaded before the PDL wait, and as it is used unchanged, Triton also
converts it to the dot operands' layout there (the following tiles load at the top of the
loop, where Triton pipelines them): cache rows other than the current position's were written
by earlier steps, complete before this step's graph began. After the wait: the new token's
q, k, v (loaded together), its norms and RoPE, the cache append and the tile arithmetic.

Bytes per call: K and V once, 2 * sum(seq_lens) * Hkv * D * e, plus q and out; SPLIT > 1 adds
up to B * Hq * SPLIT * (D + 1) * 4 of float32 partials written and read once.
"""

import triton
import triton.language as tl

from evokernel.kernels.overlap import pdl_enter


@triton.jit
def norm_rope(
    x1, x2, w1, w2, c, s, eps, D: tl.constexpr, dtype: tl.constexpr, NORM: tl.constexpr
):  # fmt: skip
    """Per-row RMSNorm (NORM) then RoPE, rounded as transformers rounds, on row halves.

    x1, x2 [R, D/2] float32 (the two halves of R heads, values of `dtype`), w1, w2 [D/2]
    float32 (norm weight halves; unused without NORM), c, s [D/2] float32 (cos/sin already
    rounded to the dtype). Returns the rotated halves (o1, o2) in `dtype`:
    o1 = y1*c - y2*s,  o2 = y2*c + y1*s,  y = rms_norm(x) * w (NORM) or x."""
    if NORM:
        # One reduction over both halves: each is a chain of shuffles and block barriers.
        rstd = tl.rsqrt(tl.sum(x1 * x1 + x2 * x2, axis=1) / D + eps)
        y1 = (x1 * rstd[:, None]).to(dtype).to(tl.float32) * w1[None, :]
        y2 = (x2 * rstd[:, None]).to(dtype).to(tl.float32) * w2[None, :]
        y1 = y1.to(dtype).to(tl.float32)
        y2 = y2.to(dtype).to(tl.float32)
    else:
        y1 = x1
        y2 = x2
    c2 = c[None, :]
    s2 = s[None, :]
    o1 = (y1 * c2).to(dtype).to(tl.float32) + (-y2 * s2).to(dtype).to(tl.float32)
    o2 = (y2 * c2).to(dtype).to(tl.float32) + (y1 * s2).to(dtype).to(tl.float32)
    return o1.to(dtype), o2.to(dtype)


@triton.jit
def _kv_tile(base, offs_n, offs_h, end, stride_s, HALF: tl.constexpr):
    """Rows offs_n (< end) of one kv head as two [BLOCK_N, HALF] halves (0 where masked)."""
    mask = (offs_n < end)[:, None]
    ptrs = base + offs_n[:, None].to(tl.int64) * stride_s + offs_h[None, :]
    lo = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
    hi = tl.load(ptrs + HALF, mask=mask, other=0.0, eviction_policy="evict_first")
    return lo, hi


@triton.jit
def _dot(a, b, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _rows_dot(a, b):
    """[G, H] x [N, H] -> [G, N] on the CUDA cores, float32 (no padding of G to 16)."""
    return tl.sum(a.to(tl.float32)[:, None, :] * b.to(tl.float32)[None, :, :], axis=2)


@triton.jit
def _rows_mix(p, v):
    """[G, N] x [N, H] -> [G, H] on the CUDA cores, float32."""
    return tl.sum(p.to(tl.float32)[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)


@triton.jit
def _tile(
    q_lo, q_hi, k_lo, k_hi, v_lo, v_hi, offs_n, end, pos, m_i, l_i, acc_lo, acc_hi, qk_scale,
    IEEE: tl.constexpr, MMA: tl.constexpr,
):  # fmt: skip
    """One K/V tile of the online softmax: (m_i, l_i, acc_lo, acc_hi) updated over the tile's
    rows below `end` except the row at `pos` (the new token's, counted apart). MMA: the two
    products as tensor-core dots; else on the CUDA cores (p rounded to the dtype either way)."""
    if MMA:
        scores = _dot(q_lo, tl.trans(k_lo), IEEE) + _dot(q_hi, tl.trans(k_hi), IEEE)
    else:
        scores = _rows_dot(q_lo, k_lo) + _rows_dot(q_hi, k_hi)
    live = (offs_n < end) & (offs_n != pos)
    scores = tl.where(live[None, :], scores * qk_scale, -float("inf"))
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(scores - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    pv = p.to(v_lo.dtype)
    if MMA:
        acc_lo = acc_lo * alpha[:, None] + _dot(pv, v_lo, IEEE)
        acc_hi = acc_hi * alpha[:, None] + _dot(pv, v_hi, IEEE)
    else:
        acc_lo = acc_lo * alpha[:, None] + _rows_mix(pv, v_lo)
        acc_hi = acc_hi * alpha[:, None] + _rows_mix(pv, v_hi)
    return m_new, l_i, acc_lo, acc_hi


@triton.jit
def attention_kernel(
    q_ptr,  # FUSED: packed qkv [B, (Hq + 2 Hkv) * D]; else q [B, Hq, D]
    q_norm_ptr,  # [D] (FUSED and QK_NORM)
    k_norm_ptr,  # [D] (FUSED and QK_NORM)
    cos_ptr,  # [P, D/2] float32 (FUSED)
    sin_ptr,  # [P, D/2] float32 (FUSED)
    pos_ptr,  # [B] int32: the decoded token's position (FUSED)
    seq_lens_ptr,  # [B] int32
    k_ptr,  # [B, Hkv, S, D] (last dim contiguous)
    v_ptr,  # [B, Hkv, S, D]
    out_ptr,  # [B, Hq, D] (DIRECT)
    part_ptr,  # [B * Hq, SPLIT, D] float32 (not DIRECT)
    lse_ptr,  # [B * Hq, SPLIT] float32, log2 domain (not DIRECT)
    ticket_ptr,  # [B * Hkv] int32 counters, 0 at launch and after it (TICKET)
    scale,
    eps,
    SPLIT,
    Hkv,
    S,
    P,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_vb,
    stride_vh,
    stride_vs,
    stride_ob,
    stride_oh,
    GROUP: tl.constexpr,
    D: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FUSED: tl.constexpr,
    QK_NORM: tl.constexpr,  # FUSED: q and k RMS-normalised per head before RoPE
    DIRECT: tl.constexpr,
    TICKET: tl.constexpr,
    BLOCK_S: tl.constexpr,  # >= SPLIT (TICKET)
    BLOCK_R: tl.constexpr,  # >= GROUP, a power of two (TICKET)
    IEEE: tl.constexpr,
    MMA: tl.constexpr,  # tensor-core products (BLOCK_G >= 16); else CUDA cores
    PDL: tl.constexpr,
):
    HALF: tl.constexpr = D // 2
    pid = tl.program_id(0)
    split = tl.program_id(1)
    b = pid // Hkv
    j = pid % Hkv
    dtype = k_ptr.dtype.element_ty

    seq_len = tl.load(seq_lens_ptr + b)  # stable: set before this step's graph began
    chunk = tl.cdiv(tl.cdiv(seq_len, SPLIT), BLOCK_N) * BLOCK_N
    start = split * chunk
    end = tl.minimum(start + chunk, seq_len)

    offs_h = tl.arange(0, HALF)
    offs_g = tl.arange(0, BLOCK_G)
    heads = j * GROUP + offs_g  # query heads of this kv head
    in_group = offs_g < GROUP
    k_base = k_ptr + b.to(tl.int64) * stride_kb + j * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + j * stride_vh
    k_lo, k_hi = _kv_tile(k_base, start + tl.arange(0, BLOCK_N), offs_h, end, stride_ks, HALF)
    v_lo, v_hi = _kv_tile(v_base, start + tl.arange(0, BLOCK_N), offs_h, end, stride_vs, HALF)

    if FUSED:
        pos = tl.load(pos_ptr + b)
        in_table = (pos >= 0) & (pos < P)
        c = tl.load(cos_ptr + pos * HALF + offs_h, mask=in_table, other=0.0)
        s = tl.load(sin_ptr + pos * HALF + offs_h, mask=in_table, other=0.0)
        c = c.to(dtype).to(tl.float32)
        s = s.to(dtype).to(tl.float32)
        if QK_NORM:
            qw1 = tl.load(q_norm_ptr + offs_h).to(tl.float32)
            qw2 = tl.load(q_norm_ptr + HALF + offs_h).to(tl.float32)
            kw1 = tl.load(k_norm_ptr + offs_h).to(tl.float32)
            kw2 = tl.load(k_norm_ptr + HALF + offs_h).to(tl.float32)
        else:  # unused
            qw1 = c
            qw2 = c
            kw1 = c
            kw2 = c

    pdl_enter(PDL)

    q_rows = q_ptr + b.to(tl.int64) * stride_qb + heads[:, None] * stride_qh + offs_h[None, :]
    q_lo = tl.load(q_rows, mask=in_group[:, None], other=0.0)
    q_hi = tl.load(q_rows + HALF, mask=in_group[:, None], other=0.0)
    if FUSED:
        # Every load of the new token's q, k, v first: one L2 round trip, not one per use.
        k_row = q_ptr + b.to(tl.int64) * stride_qb + (Hkv * GROUP + j) * stride_qh + offs_h
        k1 = tl.load(k_row).to(tl.float32)[None, :]
        k2 = tl.load(k_row + HALF).to(tl.float32)[None, :]
        v_row = k_row + Hkv * stride_qh
        vn_lo = tl.load(v_row).to(dtype)[None, :]
        vn_hi = tl.load(v_row + HALF).to(dtype)[None, :]
        q_lo, q_hi = norm_rope(q_lo.to(tl.float32), q_hi.to(tl.float32), qw1, qw2, c, s, eps, D,
                               dtype, QK_NORM)  # fmt: skip
        q_lo = tl.where(in_group[:, None], q_lo, 0.0).to(dtype)
        q_hi = tl.where(in_group[:, None], q_hi, 0.0).to(dtype)
        kn_lo, kn_hi = norm_rope(k1, k2, kw1, kw2, c, s, eps, D, dtype, QK_NORM)  # [1, HALF]
        holds = (start <= pos) & (pos < end)  # this chunk holds the new row
        owner = holds & (pos < S) & in_table
        k_dst = k_base + pos.to(tl.int64) * stride_ks + offs_h[None, :]
        v_dst = v_base + pos.to(tl.int64) * stride_vs + offs_h[None, :]
        tl.store(k_dst, kn_lo, mask=owner)
        tl.store(k_dst + HALF, kn_hi, mask=owner)
        tl.store(v_dst, vn_lo, mask=owner)
        tl.store(v_dst + HALF, vn_hi, mask=owner)

    qk_scale = scale * 1.4426950408889634  # scores in log2 units
    m_i = tl.full([BLOCK_G], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc_lo = tl.zeros([BLOCK_G, HALF], tl.float32)
    acc_hi = tl.zeros([BLOCK_G, HALF], tl.float32)
    if FUSED:  # the new row starts the online softmax of the chunk that holds it
        s_new = tl.sum(q_lo.to(tl.float32) * kn_lo.to(tl.float32), axis=1)
        s_new += tl.sum(q_hi.to(tl.float32) * kn_hi.to(tl.float32), axis=1)
        m_i = tl.where(holds, s_new * qk_scale, m_i)
        l_i = tl.where(holds, 1.0, l_i)
        acc_lo = tl.where(holds, acc_lo + vn_lo.to(tl.float32), acc_lo)
        acc_hi = tl.where(holds, acc_hi + vn_hi.to(tl.float32), acc_hi)
    else:
        pos = -1  # no row is counted apart
    if start < end:  # the first tile, loaded before the PDL wait
        m_i, l_i, acc_lo, acc_hi = _tile(
            q_lo, q_hi, k_lo, k_hi, v_lo, v_hi, start + tl.arange(0, BLOCK_N), end, pos,
            m_i, l_i, acc_lo, acc_hi, qk_scale, IEEE, MMA,
        )  # fmt: skip
    for n0 in range(start + BLOCK_N, end, BLOCK_N):
        # Loads at the top of the loop: Triton pipelines them several tiles deep.
        offs_n = n0 + tl.arange(0, BLOCK_N)
        k_lo, k_hi = _kv_tile(k_base, offs_n, offs_h, end, stride_ks, HALF)
        v_lo, v_hi = _kv_tile(v_base, offs_n, offs_h, end, stride_vs, HALF)
        m_i, l_i, acc_lo, acc_hi = _tile(
            q_lo, q_hi, k_lo, k_hi, v_lo, v_hi, offs_n, end, pos, m_i, l_i, acc_lo, acc_hi,
            qk_scale, IEEE, MMA,
        )  # fmt: skip

    n_chunks = tl.cdiv(seq_len, tl.maximum(chunk, 1))  # the non-empty ones
    if DIRECT or (TICKET and n_chunks == 1):  # one chunk holds it all: chunk 0 writes out
        if split == 0:
            o_b = out_ptr + b.to(tl.int64) * stride_ob
            o_rows = o_b + heads[:, None] * stride_oh + offs_h[None, :]
            tl.store(o_rows, (acc_lo / l_i[:, None]).to(dtype), mask=in_group[:, None])
            tl.store(o_rows + HALF, (acc_hi / l_i[:, None]).to(dtype), mask=in_group[:, None])
    elif TICKET:
        if split < n_chunks:
            _store_partial(part_ptr, lse_ptr, b * Hkv * GROUP + heads, split, SPLIT, in_group,
                           offs_h, m_i, l_i, acc_lo, acc_hi, D, HALF)  # fmt: skip
            tl.debug_barrier()  # every thread's partials stored before the ticket is taken
            ticket = tl.atomic_add(ticket_ptr + pid, 1, sem="acq_rel", scope="gpu")
            if ticket == n_chunks - 1:  # the last chunk to finish merges them all
                tl.store(ticket_ptr + pid, 0)
                _merge(part_ptr, lse_ptr, out_ptr + b.to(tl.int64) * stride_ob,
                       (b * Hkv + j) * GROUP, j * GROUP, n_chunks, SPLIT, stride_oh, GROUP, D,
                       BLOCK_R, BLOCK_S)  # fmt: skip
    else:
        _store_partial(part_ptr, lse_ptr, b * Hkv * GROUP + heads, split, SPLIT, in_group,
                       offs_h, m_i, l_i, acc_lo, acc_hi, D, HALF)  # fmt: skip


@triton.jit
def _store_partial(
    part_ptr, lse_ptr, rows, split, SPLIT, in_group, offs_h, m_i, l_i, acc_lo, acc_hi,
    D: tl.constexpr, HALF: tl.constexpr,
):  # fmt: skip
    """Chunk `split`'s normalised partial [D] and log2-sum-exp of query rows `rows` (of
    B * Hq); an empty chunk stores lse -inf."""
    row = rows * SPLIT + split  # [BLOCK_G] rows of [B*Hq*SPLIT]
    empty = l_i == 0.0
    safe_l = tl.where(empty, 1.0, l_i)
    dst = part_ptr + row[:, None].to(tl.int64) * D + offs_h[None, :]
    tl.store(dst, acc_lo / safe_l[:, None], mask=in_group[:, None])
    tl.store(dst + HALF, acc_hi / safe_l[:, None], mask=in_group[:, None])
    lse = tl.where(empty, -float("inf"), m_i + tl.log2(safe_l))
    tl.store(lse_ptr + row, lse, mask=in_group)


@triton.jit
def _merge(
    part_ptr, lse_ptr, out_b, row0, h0, n_chunks, SPLIT, stride_oh,
    ROWS: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr,
):  # fmt: skip
    """out_b[h0 + r, :] = sum_s w_s * part_s / sum_s w_s over the first n_chunks chunks of
    query rows row0 + r (of B * Hq), r < ROWS, w_s = 2^(lse_s - max lse): 0 for an empty chunk
    (lse -inf, partial 0). Every chunk read must have been written this step. All ROWS rows'
    log-sum-exps and partials are loaded at once (one L2 round trip, no load waiting on
    another), through L2 (.cg): with TICKET, other programs of this launch wrote them."""
    offs_r = tl.arange(0, BLOCK_R)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, D)
    live = (offs_r < ROWS)[:, None] & (offs_s < n_chunks)[None, :]  # [BLOCK_R, BLOCK_S]
    at = (row0 + offs_r)[:, None] * SPLIT + offs_s[None, :]
    lse = tl.load(lse_ptr + at, mask=live, other=-float("inf"), cache_modifier=".cg")
    parts = tl.load(
        part_ptr + at[:, :, None].to(tl.int64) * D + offs_d[None, None, :],
        mask=live[:, :, None], other=0.0, cache_modifier=".cg",
    )  # fmt: skip
    top = tl.max(lse, axis=1)
    w = tl.exp2(lse - tl.where(offs_r < ROWS, top, 0.0)[:, None])  # [BLOCK_R, BLOCK_S]
    out = tl.sum(parts * w[:, :, None], axis=1) / tl.sum(w, axis=1)[:, None]
    dst = out_b + (h0 + offs_r)[:, None] * stride_oh + offs_d[None, :]
    tl.store(dst, out.to(out_b.dtype.element_ty), mask=(offs_r < ROWS)[:, None])


@triton.jit
def attention_combine_kernel(
    part_ptr,  # [B * Hq, SPLIT, D] float32
    lse_ptr,  # [B * Hq, SPLIT] float32 (log2 domain; -inf for empty chunks)
    out_ptr,  # [B, Hq, D]
    Hq,
    SPLIT,
    stride_ob,
    stride_oh,
    D: tl.constexpr,
    BLOCK_S: tl.constexpr,
    PDL: tl.constexpr,
):
    """Program b * Hq + h: `_merge` of row b * Hq + h's SPLIT chunks (each wrote its partial,
    an empty one 0 with lse -inf; the one holding position 0 is never empty)."""
    row = tl.program_id(0)
    pdl_enter(PDL)
    out_b = out_ptr + (row // Hq).to(tl.int64) * stride_ob
    _merge(part_ptr, lse_ptr, out_b, row, row % Hq, SPLIT, SPLIT, stride_oh, 1, D, 1, BLOCK_S)
