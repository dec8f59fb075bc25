"""Seed candidate for `decode_layer`: the engine's own decode layer (its fused Triton kernels,
kernels/gemv.py, kernels/attention.py, kernels/overlap.py, launched as ops/decode.py does) in
one file. Five launches per layer, in `DecoderModel._decode_layers`' order:

  1. `_norm_gemv`      qkv = W_qkv @ rms_norm(h)                         [B, (Hq + 2 Hkv) D]
  2. `_attention`      per kv head: q/k RMSNorm + RoPE at positions[b], K and V written to the
                       cache at positions[b], flash-decoding over [0, seq_lens[b]) with the new
                       row counted apart, from registers; `_combine` merges the chunks (SPLIT > 1)
  3. `_gemv_add`       h += W_o @ attn, in place
  4. `_norm_gate_up`   act = silu(W_g @ n) * (W_u @ n), n = rms_norm(h)
  5. `_gemv_add`       h += W_down @ act, in place; returns h

GEMV: program p owns BLOCK_N weight rows and the whole K (about TILE_BYTES of weights, loaded
into registers before it waits on the previous kernel), BLOCK_N lowered until the programs fill
one wave of SMs. Rounding follows transformers' Qwen3 in the model dtype (norm outputs, every
projection, the residual sums, SiLU and its product).

Attention: program (b * Hkv + j, s) serves kv head j of sequence b and its GROUP query heads
(padded to BLOCK_G >= 16 rows for tensor-core dots; under SHORT_MAX, with SHORT_MMA off, the
products run on the CUDA cores, unpadded), online softmax in float32 over BLOCK_N-row
tiles of the s-th chunk (SHORT_BLOCK_N-row tiles under bounds up to SHORT_MAX); the context
is split (SPLIT > 1) beyond DIRECT_MAX cache positions, into chunks of at least MIN_CHUNK, their
count rounded up to a power of two within PROGRAMS_PER_SM programs per SM, so that where the
GPU has room a chunk is one tile, loaded (and converted for the dots) before the PDL wait.

Structural knobs:
  PDL           programmatic dependent launch (CUDA sm_90+ only; checked once per device, never
                under the interpreter): each kernel loads its weights (and the first K/V tile)
                before it waits for the previous kernel, and lets the next one launch early.
  SPLIT_KV      False: one program per (sequence, kv head) over the whole context, no combine.
  EXP2          base-2 softmax (exp2 with log2(e) folded into the scale) or natural exp.
  FUSE_GATE_UP  False: one GEMV over the stacked gate/up rows, then a SiLU-mul kernel.

Nothing syncs with the host and every size follows from shapes and the host-side bound
max_len, so a layer can be captured in a CUDA graph.
"""

import functools

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

# EVOLVE-BLOCK-START
TILE_BYTES = 32768  # tune: 16384, 32768, 65536
ATTN_BLOCK_N = 64  # tune: 32, 64
PDL = True  # tune: False, True
SPLIT_KV = True  # tune: False, True
EXP2 = True  # tune: False, True
FUSE_GATE_UP = True  # tune: False, True
GEMV_WARPS = 0  # 0: 8 warps for tiles of >= 16K elements, else 4
ATTN_WARPS = 4
COMBINE_WARPS = 1  # the kernel that merges the split's chunks
SHORT_BLOCK_N = 16  # attention tile rows for bounds up to SHORT_MAX
SHORT_MAX = 256
SHORT_MMA = False  # bounds up to SHORT_MAX: tensor-core products (else CUDA cores, no padding)
DIRECT_MAX = 16  # up to this bound one pass per kv head (no combine kernel)
MIN_CHUNK = 16  # beyond it, positions per attention program at the least
PROGRAMS_PER_SM = 2  # B * Hkv * SPLIT up to this many per SM
MAX_SPLIT = 64


@triton.jit
def _pdl_enter(PDL: tl.constexpr):
    """Let the next kernel launch, then wait until the previous one has finished (PDL)."""
    if PDL:
        gdc_launch_dependents()
        gdc_wait()


# --- GEMV kernels ------------------------------------------------------------------------------


@triton.jit
def _weight_tile(w_ptr, rows, N, stride_w, K: tl.constexpr, BLOCK_K: tl.constexpr):
    """W[rows, :K] as a [BLOCK_N, BLOCK_K] tile in the weight dtype (masked rows/cols are 0)."""
    cols = tl.arange(0, BLOCK_K)
    ptrs = w_ptr + rows[:, None].to(tl.int64) * stride_w + cols[None, :]
    mask = (rows[:, None] < N) & (cols[None, :] < K)
    return tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first")


@triton.jit
def _input_row(x_ptr, norm_w, cols, eps, K: tl.constexpr, NORM: tl.constexpr):
    """One activation row [BLOCK_K] as float32; with NORM the RMS-normalised row, rounded as
    transformers rounds (to the dtype before and after the weight `norm_w`)."""
    x = tl.load(x_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
    if NORM:
        dtype = x_ptr.dtype.element_ty
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / K + eps)
        x = ((x * rstd).to(dtype).to(tl.float32) * norm_w).to(dtype).to(tl.float32)
    return x


@triton.jit
def _norm_gemv(
    x_ptr, norm_ptr, w_ptr, y_ptr, M, N, stride_x, stride_w, stride_y, eps,
    K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """y [M, N] = W [N, K] @ rms_norm(x [M, K]) per row."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    w = _weight_tile(w_ptr, rows, N, stride_w, K, BLOCK_K)
    norm_w = tl.load(norm_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
    _pdl_enter(PDL)
    for m in tl.static_range(BLOCK_M):
        if m < M:
            x = _input_row(x_ptr + m * stride_x, norm_w, cols, eps, K, True)
            y = tl.sum(w.to(tl.float32) * x[None, :], axis=1)
            tl.store(y_ptr + m * stride_y + rows, y.to(y_ptr.dtype.element_ty), mask=rows < N)


@triton.jit
def _gemv_add(
    x_ptr, w_ptr, res_ptr, M, N, stride_x, stride_w, stride_res,
    K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """res [M, N] += round(W [N, K] @ x [M, K]), in place."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    w = _weight_tile(w_ptr, rows, N, stride_w, K, BLOCK_K)
    _pdl_enter(PDL)
    dtype = res_ptr.dtype.element_ty
    for m in tl.static_range(BLOCK_M):
        if m < M:
            # The residual is loaded with x, before the reduction: both L2 round trips overlap.
            x = tl.load(x_ptr + m * stride_x + cols, mask=cols < K, other=0.0).to(tl.float32)
            res_rows = res_ptr + m * stride_res + rows
            r = tl.load(res_rows, mask=rows < N, other=0.0).to(tl.float32)
            y = tl.sum(w.to(tl.float32) * x[None, :], axis=1).to(dtype).to(tl.float32)
            tl.store(res_rows, (r + y).to(dtype), mask=rows < N)


@triton.jit
def _norm_gate_up(
    x_ptr, norm_ptr, w_ptr, act_ptr, M, INTER, stride_x, stride_w, stride_act, eps,
    K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """act [M, I] = silu(Wg @ n) * (Wu @ n), n = rms_norm(x); W [2I, K]: gate rows, up rows
    (INTER = I)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    wg = _weight_tile(w_ptr, rows, INTER, stride_w, K, BLOCK_K)
    wu = _weight_tile(w_ptr + INTER * stride_w, rows, INTER, stride_w, K, BLOCK_K)
    norm_w = tl.load(norm_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
    _pdl_enter(PDL)
    dtype = act_ptr.dtype.element_ty
    for m in tl.static_range(BLOCK_M):
        if m < M:
            x = _input_row(x_ptr + m * stride_x, norm_w, cols, eps, K, True)
            g = tl.sum(wg.to(tl.float32) * x[None, :], axis=1).to(dtype).to(tl.float32)
            u = tl.sum(wu.to(tl.float32) * x[None, :], axis=1).to(dtype).to(tl.float32)
            s = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
            tl.store(act_ptr + m * stride_act + rows, (s * u).to(dtype), mask=rows < INTER)


@triton.jit
def _silu_mul(
    gu_ptr, act_ptr, INTER, stride_gu, stride_act, BLOCK: tl.constexpr, PDL: tl.constexpr
):  # fmt: skip
    """act[m] = round(round(silu(gate)) * up), gate_up [M, 2I], INTER = I (program (block, m))."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = tl.program_id(1)
    _pdl_enter(PDL)
    dtype = act_ptr.dtype.element_ty
    mask = offs < INTER
    g = tl.load(gu_ptr + m * stride_gu + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + m * stride_gu + INTER + offs, mask=mask, other=0.0).to(tl.float32)
    s = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
    tl.store(act_ptr + m * stride_act + offs, (s * u).to(dtype), mask=mask)


# --- attention ---------------------------------------------------------------------------------


@triton.jit
def _norm_rope(x1, x2, w1, w2, c, s, eps, D: tl.constexpr, dtype: tl.constexpr):
    """Per-row RMSNorm then RoPE on row halves x1, x2 [R, D/2] float32, rounded as
    transformers rounds; c, s [D/2] float32 (already rounded to the dtype)."""
    rstd = tl.rsqrt(tl.sum(x1 * x1 + x2 * x2, axis=1) / D + eps)
    y1 = ((x1 * rstd[:, None]).to(dtype).to(tl.float32) * w1[None, :]).to(dtype).to(tl.float32)
    y2 = ((x2 * rstd[:, None]).to(dtype).to(tl.float32) * w2[None, :]).to(dtype).to(tl.float32)
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
def _exp(x, EXP2: tl.constexpr):
    if EXP2:
        return tl.exp2(x)
    return tl.exp(x)


@triton.jit
def _rows_dot(a, b):
    """[G, H] x [N, H] -> [G, N] on the CUDA cores, float32."""
    return tl.sum(a.to(tl.float32)[:, None, :] * b.to(tl.float32)[None, :, :], axis=2)


@triton.jit
def _rows_mix(p, v):
    """[G, N] x [N, H] -> [G, H] on the CUDA cores, float32."""
    return tl.sum(p.to(tl.float32)[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)


@triton.jit
def _tile(
    q_lo, q_hi, k_lo, k_hi, v_lo, v_hi, offs_n, end, pos, m_i, l_i, acc_lo, acc_hi, qk_scale,
    IEEE: tl.constexpr, EXP2: tl.constexpr, MMA: tl.constexpr,
):  # fmt: skip
    """One K/V tile of the online softmax (scores in log2 units when EXP2) over its rows below
    `end` except the row at `pos` (the new token's, counted apart); the two products as
    tensor-core dots (MMA) or on the CUDA cores."""
    if MMA:
        scores = _dot(q_lo, tl.trans(k_lo), IEEE) + _dot(q_hi, tl.trans(k_hi), IEEE)
    else:
        scores = _rows_dot(q_lo, k_lo) + _rows_dot(q_hi, k_hi)
    live = (offs_n < end) & (offs_n != pos)
    scores = tl.where(live[None, :], scores * qk_scale, -float("inf"))
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))
    alpha = _exp(m_i - m_new, EXP2)
    p = _exp(scores - m_new[:, None], EXP2)
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
def _attention(
    qkv_ptr, q_norm_ptr, k_norm_ptr, cos_ptr, sin_ptr, pos_ptr, seq_lens_ptr, k_ptr, v_ptr,
    out_ptr, part_ptr, lse_ptr, scale, eps, SPLIT, Hkv, S, P, stride_qkv,
    stride_kb, stride_kh, stride_ks, stride_vb, stride_vh, stride_vs, stride_ob,
    GROUP: tl.constexpr, D: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
    DIRECT: tl.constexpr, IEEE: tl.constexpr, EXP2: tl.constexpr, MMA: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """Program (b * Hkv + j, s): q/k prep of kv head j's heads, the cache write (by the program
    whose chunk holds the position) and attention over the s-th chunk of [0, seq_lens[b])."""
    HALF: tl.constexpr = D // 2
    pid = tl.program_id(0)
    split = tl.program_id(1)
    b = pid // Hkv
    j = pid % Hkv
    dtype = k_ptr.dtype.element_ty

    seq_len = tl.load(seq_lens_ptr + b)  # stable: set before this step began
    chunk = tl.cdiv(tl.cdiv(seq_len, SPLIT), BLOCK_N) * BLOCK_N
    start = split * chunk
    end = tl.minimum(start + chunk, seq_len)

    offs_h = tl.arange(0, HALF)
    offs_g = tl.arange(0, BLOCK_G)
    heads = j * GROUP + offs_g  # query heads of this kv head
    in_group = offs_g < GROUP
    k_base = k_ptr + b.to(tl.int64) * stride_kb + j * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + j * stride_vh
    # The first K/V tile before the PDL wait: rows other than the position's were written by
    # earlier steps; the row at the position is counted apart below.
    k_lo, k_hi = _kv_tile(k_base, start + tl.arange(0, BLOCK_N), offs_h, end, stride_ks, HALF)
    v_lo, v_hi = _kv_tile(v_base, start + tl.arange(0, BLOCK_N), offs_h, end, stride_vs, HALF)

    pos = tl.load(pos_ptr + b)
    in_table = (pos >= 0) & (pos < P)
    c = tl.load(cos_ptr + pos * HALF + offs_h, mask=in_table, other=0.0)
    s = tl.load(sin_ptr + pos * HALF + offs_h, mask=in_table, other=0.0)
    c = c.to(dtype).to(tl.float32)
    s = s.to(dtype).to(tl.float32)
    qw1 = tl.load(q_norm_ptr + offs_h).to(tl.float32)
    qw2 = tl.load(q_norm_ptr + HALF + offs_h).to(tl.float32)
    kw1 = tl.load(k_norm_ptr + offs_h).to(tl.float32)
    kw2 = tl.load(k_norm_ptr + HALF + offs_h).to(tl.float32)

    _pdl_enter(PDL)

    # Every load of the new token's q, k, v first: one L2 round trip, not one per use.
    row = qkv_ptr + b.to(tl.int64) * stride_qkv
    q_rows = row + heads[:, None] * D + offs_h[None, :]
    q_lo = tl.load(q_rows, mask=in_group[:, None], other=0.0).to(tl.float32)
    q_hi = tl.load(q_rows + HALF, mask=in_group[:, None], other=0.0).to(tl.float32)
    k_row = row + (Hkv * GROUP + j) * D + offs_h
    k1 = tl.load(k_row).to(tl.float32)[None, :]  # [1, HALF]
    k2 = tl.load(k_row + HALF).to(tl.float32)[None, :]
    v_row = k_row + Hkv * D
    vn_lo = tl.load(v_row).to(dtype)[None, :]
    vn_hi = tl.load(v_row + HALF).to(dtype)[None, :]
    q_lo, q_hi = _norm_rope(q_lo, q_hi, qw1, qw2, c, s, eps, D, dtype)
    q_lo = tl.where(in_group[:, None], q_lo, 0.0).to(dtype)
    q_hi = tl.where(in_group[:, None], q_hi, 0.0).to(dtype)
    kn_lo, kn_hi = _norm_rope(k1, k2, kw1, kw2, c, s, eps, D, dtype)
    holds = (start <= pos) & (pos < end)  # this chunk holds the new row
    owner = holds & (pos < S) & in_table
    k_dst = k_base + pos.to(tl.int64) * stride_ks + offs_h[None, :]
    v_dst = v_base + pos.to(tl.int64) * stride_vs + offs_h[None, :]
    tl.store(k_dst, kn_lo, mask=owner)
    tl.store(k_dst + HALF, kn_hi, mask=owner)
    tl.store(v_dst, vn_lo, mask=owner)
    tl.store(v_dst + HALF, vn_hi, mask=owner)

    if EXP2:
        qk_scale = scale * 1.4426950408889634  # scores in log2 units
    else:
        qk_scale = scale
    m_i = tl.full([BLOCK_G], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc_lo = tl.zeros([BLOCK_G, HALF], tl.float32)
    acc_hi = tl.zeros([BLOCK_G, HALF], tl.float32)
    # The new row starts the online softmax of the chunk that holds it.
    s_new = tl.sum(q_lo.to(tl.float32) * kn_lo.to(tl.float32), axis=1)
    s_new += tl.sum(q_hi.to(tl.float32) * kn_hi.to(tl.float32), axis=1)
    m_i = tl.where(holds, s_new * qk_scale, m_i)
    l_i = tl.where(holds, 1.0, l_i)
    acc_lo = tl.where(holds, acc_lo + vn_lo.to(tl.float32), acc_lo)
    acc_hi = tl.where(holds, acc_hi + vn_hi.to(tl.float32), acc_hi)
    if start < end:  # the first tile, loaded before the PDL wait
        m_i, l_i, acc_lo, acc_hi = _tile(
            q_lo, q_hi, k_lo, k_hi, v_lo, v_hi, start + tl.arange(0, BLOCK_N), end, pos,
            m_i, l_i, acc_lo, acc_hi, qk_scale, IEEE, EXP2, MMA,
        )  # fmt: skip
    for n0 in range(start + BLOCK_N, end, BLOCK_N):
        # Loads at the top of the loop: Triton pipelines them several tiles deep.
        offs_n = n0 + tl.arange(0, BLOCK_N)
        k_lo, k_hi = _kv_tile(k_base, offs_n, offs_h, end, stride_ks, HALF)
        v_lo, v_hi = _kv_tile(v_base, offs_n, offs_h, end, stride_vs, HALF)
        m_i, l_i, acc_lo, acc_hi = _tile(
            q_lo, q_hi, k_lo, k_hi, v_lo, v_hi, offs_n, end, pos, m_i, l_i, acc_lo, acc_hi,
            qk_scale, IEEE, EXP2, MMA,
        )  # fmt: skip

    if DIRECT:
        o_rows = out_ptr + b.to(tl.int64) * stride_ob + heads[:, None] * D + offs_h[None, :]
        tl.store(o_rows, (acc_lo / l_i[:, None]).to(dtype), mask=in_group[:, None])
        tl.store(o_rows + HALF, (acc_hi / l_i[:, None]).to(dtype), mask=in_group[:, None])
    else:
        part_row = (b * Hkv * GROUP + heads) * SPLIT + split  # [BLOCK_G] rows of [B*Hq*SPLIT]
        empty = l_i == 0.0
        safe_l = tl.where(empty, 1.0, l_i)
        dst = part_ptr + part_row[:, None].to(tl.int64) * D + offs_h[None, :]
        tl.store(dst, acc_lo / safe_l[:, None], mask=in_group[:, None])
        tl.store(dst + HALF, acc_hi / safe_l[:, None], mask=in_group[:, None])
        if EXP2:
            lse = tl.where(empty, -float("inf"), m_i + tl.log2(safe_l))
        else:
            lse = tl.where(empty, -float("inf"), m_i + tl.log(safe_l))
        tl.store(lse_ptr + part_row, lse, mask=in_group)


@triton.jit
def _combine(
    part_ptr, lse_ptr, out_ptr, Hq, SPLIT, stride_ob,
    D: tl.constexpr, BLOCK_S: tl.constexpr, EXP2: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    """Program b * Hq + h: out = sum_s w_s * part_s / sum_s w_s, w_s = exp(lse_s - max lse),
    0 for an empty chunk (its partial is 0, written like every chunk's; never the first).
    Both loads at once: one L2 round trip."""
    row = tl.program_id(0)
    b = row // Hq
    h = row % Hq
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, D)
    _pdl_enter(PDL)
    lse = tl.load(lse_ptr + row * SPLIT + offs_s, mask=offs_s < SPLIT, other=-float("inf"))
    parts = tl.load(
        part_ptr + (row * SPLIT + offs_s[:, None]).to(tl.int64) * D + offs_d[None, :],
        mask=(offs_s < SPLIT)[:, None],
        other=0.0,
    )
    w = _exp(lse - tl.max(lse, axis=0), EXP2)
    out = tl.sum(parts * w[:, None], axis=0) / tl.sum(w, axis=0)
    o_ptrs = out_ptr + b.to(tl.int64) * stride_ob + h * D + offs_d
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty))


# --- launchers ---------------------------------------------------------------------------------


def _next_pow2(n):
    return 1 << (n - 1).bit_length()


@functools.lru_cache(maxsize=16)
def _sm_count(device):
    if device.type != "cuda":
        return 4  # the interpreter: few programs keep CPU runs fast
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.lru_cache(maxsize=16)
def _pdl_ok(device):
    """PDL needs compiled (not interpreted) kernels on a CUDA device of compute capability 9+."""
    if device.type != "cuda" or not isinstance(_gemv_add, triton.JITFunction):
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


def _block_n(N, K, itemsize, device, tiles=1):
    """Rows per GEMV program: ~TILE_BYTES of weights (`tiles` tiles per row), >= 1 wave."""
    per_row = _next_pow2(K) * itemsize * tiles
    block = max(1, min(_next_pow2(N), TILE_BYTES // per_row))
    block = 1 << (block.bit_length() - 1)
    while block > 1 and triton.cdiv(N, block) < _sm_count(device):
        block //= 2
    return block


def _warps(block_n, block_k):
    if GEMV_WARPS:
        return GEMV_WARPS
    return 8 if block_n * block_k >= 16384 else 4


def _norm_linear(x, norm_weight, weight, eps, pdl):
    N, K = weight.shape
    M = x.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    block_n, block_k = _block_n(N, K, weight.element_size(), x.device), _next_pow2(K)
    _norm_gemv[(triton.cdiv(N, block_n),)](
        x, norm_weight, weight, y, M, N, x.stride(0), weight.stride(0), y.stride(0), eps,
        K=K, BLOCK_M=M, BLOCK_N=block_n, BLOCK_K=block_k, PDL=pdl,
        num_warps=_warps(block_n, block_k), launch_pdl=pdl,
    )  # fmt: skip
    return y


def _linear_residual(x, weight, residual, pdl):
    N, K = weight.shape
    M = x.shape[0]
    block_n, block_k = _block_n(N, K, weight.element_size(), x.device), _next_pow2(K)
    _gemv_add[(triton.cdiv(N, block_n),)](
        x, weight, residual, M, N, x.stride(0), weight.stride(0), residual.stride(0),
        K=K, BLOCK_M=M, BLOCK_N=block_n, BLOCK_K=block_k, PDL=pdl,
        num_warps=_warps(block_n, block_k), launch_pdl=pdl,
    )  # fmt: skip
    return residual


def _gate_up_silu(x, norm_weight, gate_up, eps, pdl):
    two_i, K = gate_up.shape
    M, inter = x.shape[0], two_i // 2
    act = torch.empty((M, inter), device=x.device, dtype=x.dtype)
    if not FUSE_GATE_UP:
        gu = _norm_linear(x, norm_weight, gate_up, eps, pdl)  # [M, 2I], rounded
        block = min(1024, _next_pow2(inter))
        _silu_mul[(triton.cdiv(inter, block), M)](
            gu, act, inter, gu.stride(0), act.stride(0), BLOCK=block, PDL=pdl, num_warps=4,
            launch_pdl=pdl,
        )  # fmt: skip
        return act
    block_n = _block_n(inter, K, gate_up.element_size(), x.device, tiles=2)
    block_k = _next_pow2(K)
    _norm_gate_up[(triton.cdiv(inter, block_n),)](
        x, norm_weight, gate_up, act, M, inter, x.stride(0), gate_up.stride(0), act.stride(0),
        eps, K=K, BLOCK_M=M, BLOCK_N=block_n, BLOCK_K=block_k, PDL=pdl,
        num_warps=_warps(2 * block_n, block_k), launch_pdl=pdl,
    )  # fmt: skip
    return act


def _split(max_len, programs_per_split, device):
    """Chunks per sequence for a bound `max_len` on seq_lens: a power of two, rounded up from
    chunks of MIN_CHUNK within PROGRAMS_PER_SM programs per SM and MAX_SPLIT."""
    if not SPLIT_KV or max_len <= DIRECT_MAX:
        return 1
    want = _next_pow2(triton.cdiv(max_len, MIN_CHUNK))
    cap = max(1, PROGRAMS_PER_SM * _sm_count(device) // max(1, programs_per_split))
    cap = 1 << (min(cap, MAX_SPLIT).bit_length() - 1)
    return min(want, cap)


def _attend(
    qkv, q_norm, k_norm, cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps, max_len,
    pdl,
):  # fmt: skip
    B = qkv.shape[0]
    _, hkv, S, D = k_cache.shape
    hq = qkv.shape[1] // D - 2 * hkv
    group = hq // hkv
    bound = min(max_len, S)
    split = _split(bound, B * hkv, qkv.device)
    short = bound <= SHORT_MAX
    block_n = SHORT_BLOCK_N if short else ATTN_BLOCK_N
    mma = SHORT_MMA or not short
    out = torch.empty((B, hq * D), device=qkv.device, dtype=qkv.dtype)
    if split == 1:
        part = lse = out  # unused
    else:
        part = torch.empty((B * hq, split, D), device=qkv.device, dtype=torch.float32)
        lse = torch.empty((B * hq, split), device=qkv.device, dtype=torch.float32)
    _attention[(B * hkv, split)](
        qkv, q_norm, k_norm, cos, sin, positions, seq_lens, k_cache, v_cache, out, part, lse,
        scale, eps, split, hkv, S, cos.shape[0], qkv.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0),
        GROUP=group, D=D, BLOCK_G=max(16, _next_pow2(group)) if mma else _next_pow2(group),
        BLOCK_N=block_n, DIRECT=split == 1, IEEE=qkv.dtype == torch.float32, EXP2=EXP2,
        MMA=mma, PDL=pdl,
        num_warps=ATTN_WARPS, launch_pdl=pdl,
    )  # fmt: skip
    if split > 1:
        _combine[(B * hq,)](
            part, lse, out, hq, split, out.stride(0),
            D=D, BLOCK_S=_next_pow2(split), EXP2=EXP2, PDL=pdl, num_warps=COMBINE_WARPS,
            launch_pdl=pdl,
        )  # fmt: skip
    return out


def _layer(
    h, input_norm, qkv_proj, q_norm, k_norm, o_proj, post_attn_norm, gate_up_proj, down_proj,
    cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps, max_len,
):  # fmt: skip
    pdl = PDL and _pdl_ok(h.device)
    qkv = _norm_linear(h, input_norm, qkv_proj, eps, pdl)
    attn = _attend(
        qkv, q_norm, k_norm, cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps,
        max_len, pdl,
    )  # fmt: skip
    _linear_residual(attn, o_proj, h, pdl)
    act = _gate_up_silu(h, post_attn_norm, gate_up_proj, eps, pdl)
    _linear_residual(act, down_proj, h, pdl)
    return h


# EVOLVE-BLOCK-END


def decode_layer(
    h, input_norm, qkv_proj, q_norm, k_norm, o_proj, post_attn_norm, gate_up_proj, down_proj,
    cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps, max_len,
):  # fmt: skip
    """One Qwen3 decoder layer's decode step for B = 1..8 sequences, one token each.

    h            [B, H]   the residual stream (not normalised); may be updated in place
    input_norm   [H]      RMSNorm weight before attention
    qkv_proj     [(Hq + 2 Hkv) D, H]   q, k and v projections stacked (rows q, then k, then v)
    q_norm, k_norm [D]    per-head RMSNorm weights of q and k
    o_proj       [H, Hq D]
    post_attn_norm [H]
    gate_up_proj [2 I, H] gate rows, then up rows
    down_proj    [H, I]
    cos, sin     [P, D/2] float32 RoPE tables (rotate-half convention)
    positions    [B] int32  where this token goes; seq_lens = positions + 1 [B] int32
    k_cache, v_cache [B, Hkv, S_max, D]: write this token's K (normed, rotated) and V at
                 [b, :, positions[b]]; attend over positions [0, seq_lens[b])
    scale, eps   floats; max_len: host-side int bound >= every seq_lens[b] (size work by it)
    returns      [B, H]   the residual stream after the layer (h + attn + mlp)
    """
    B, H = h.shape
    assert 1 <= B <= 8, "decode layers take 1..8 sequences"
    assert k_cache.dim() == 4 and v_cache.shape == k_cache.shape, "caches [B, Hkv, S_max, D]"
    _, hkv, _, D = k_cache.shape
    assert k_cache.shape[0] == B, "one cache row per sequence"
    assert D >= 32 and D & (D - 1) == 0, "head_dim must be a power of two >= 32"
    width = qkv_proj.shape[0]
    assert qkv_proj.shape[1] == H and width % D == 0 and width // D > 2 * hkv, "qkv_proj"
    assert (width // D - 2 * hkv) % hkv == 0, "query heads must be a multiple of kv heads"
    assert o_proj.shape == (H, width - 2 * hkv * D), "o_proj [H, Hq D]"
    assert gate_up_proj.shape[1] == H and gate_up_proj.shape[0] % 2 == 0, "gate_up [2I, H]"
    assert down_proj.shape == (H, gate_up_proj.shape[0] // 2), "down_proj [H, I]"
    weights = (h, input_norm, qkv_proj, q_norm, k_norm, o_proj, post_attn_norm, gate_up_proj,
               down_proj, k_cache, v_cache)  # fmt: skip
    assert all(t.dtype == h.dtype and t.device == h.device for t in weights), "one dtype"
    assert all(t.is_contiguous() for t in weights), "contiguous tensors"
    assert cos.dtype == torch.float32 and cos.shape == sin.shape and cos.shape[1] == D // 2
    assert cos.is_contiguous() and sin.is_contiguous(), "contiguous RoPE tables"
    assert positions.shape == (B,) and positions.dtype == torch.int32, "positions [B] int32"
    assert seq_lens.shape == (B,) and seq_lens.dtype == torch.int32, "seq_lens [B] int32"
    return _layer(
        h, input_norm, qkv_proj, q_norm, k_norm, o_proj, post_attn_norm, gate_up_proj,
        down_proj, cos, sin, positions, k_cache, v_cache, seq_lens, float(scale), float(eps),
        int(max_len),
    )  # fmt: skip
