"""Fused per-head q/k RMSNorm (QK_NORM) + RoPE + KV-cache append, from the packed qkv output.

Grid (B*T,): program tok = b*T + t handles every head of its token as a [BLOCK_H, D/2] tile
per half (head rows 0..Hq-1 are q heads, Hq..Hq+Hkv-1 are k heads; padding rows are masked):
  * q head h      -> q_norm, RoPE -> q_out[tok, h, :]
  * k head j      -> k_norm, RoPE -> k_cache[b, j, pos, :]
  * v head j      -> copied unchanged -> v_cache[b, j, pos, :]   (read at row Hq + Hkv + j)
where pos = positions[tok]. Each head is loaded as its two halves because RoPE pairs element
i with i + D/2 (transformers' rotate_half):  out1 = x1*cos - x2*sin,  out2 = x2*cos + x1*sin.
Rounding follows transformers: the norm rounds to the dtype before and after the weight,
cos/sin are rounded to the dtype, and each product and the sum are rounded.
Bytes per token: (Hq + 2*Hkv) * D * itemsize read, the same written.
A position outside [0, min(S, P)) writes no K/V (P = rows of the cos/sin table).
"""

import triton
import triton.language as tl


@triton.jit
def qk_norm_rope_append_kernel(
    qkv_ptr,  # [B*T, (Hq + 2*Hkv) * D]
    q_norm_ptr,  # [D] (QK_NORM)
    k_norm_ptr,  # [D] (QK_NORM)
    cos_ptr,  # [P, D/2] float32
    sin_ptr,  # [P, D/2] float32
    pos_ptr,  # [B*T] int32
    q_out_ptr,  # [B*T, Hq, D]
    k_cache_ptr,  # [B, Hkv, S, D] contiguous
    v_cache_ptr,  # [B, Hkv, S, D] contiguous
    T,
    Hq,
    Hkv,
    S,
    P,
    stride_qkv,
    eps,
    D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    QK_NORM: tl.constexpr,
):
    HALF: tl.constexpr = D // 2
    tok = tl.program_id(0).to(tl.int64)
    dtype = q_out_ptr.dtype.element_ty
    cache_dtype = k_cache_ptr.dtype.element_ty
    b = tok // T
    pos = tl.load(pos_ptr + tok).to(tl.int64)

    heads = tl.arange(0, BLOCK_H)  # [BLOCK_H]
    offs = tl.arange(0, BLOCK_HALF)  # [BLOCK_HALF]
    in_half = offs < HALF
    is_q = heads < Hq
    is_k = (heads >= Hq) & (heads < Hq + Hkv)
    tile = (is_q | is_k)[:, None] & in_half[None, :]  # [BLOCK_H, BLOCK_HALF]

    src = qkv_ptr + tok * stride_qkv + heads[:, None] * D + offs[None, :]
    x1 = tl.load(src, mask=tile, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=tile, other=0.0).to(tl.float32)

    if QK_NORM:  # per-head RMSNorm: q rows use q_norm, k rows use k_norm
        wq1 = tl.load(q_norm_ptr + offs, mask=in_half, other=0.0).to(tl.float32)
        wq2 = tl.load(q_norm_ptr + HALF + offs, mask=in_half, other=0.0).to(tl.float32)
        wk1 = tl.load(k_norm_ptr + offs, mask=in_half, other=0.0).to(tl.float32)
        wk2 = tl.load(k_norm_ptr + HALF + offs, mask=in_half, other=0.0).to(tl.float32)
        w1 = tl.where(is_q[:, None], wq1[None, :], wk1[None, :])
        w2 = tl.where(is_q[:, None], wq2[None, :], wk2[None, :])
        rstd = tl.rsqrt((tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / D + eps)
        y1 = ((x1 * rstd[:, None]).to(dtype).to(tl.float32) * w1).to(dtype).to(tl.float32)
        y2 = ((x2 * rstd[:, None]).to(dtype).to(tl.float32) * w2).to(dtype).to(tl.float32)
    else:
        y1 = x1
        y2 = x2

    # RoPE at this token's position.
    in_table = (pos >= 0) & (pos < P)
    c = tl.load(cos_ptr + pos * HALF + offs, mask=in_half & in_table, other=0.0)
    s = tl.load(sin_ptr + pos * HALF + offs, mask=in_half & in_table, other=0.0)
    c = c.to(dtype).to(tl.float32)[None, :]
    s = s.to(dtype).to(tl.float32)[None, :]
    o1 = (y1 * c).to(dtype).to(tl.float32) + (-y2 * s).to(dtype).to(tl.float32)
    o2 = (y2 * c).to(dtype).to(tl.float32) + (y1 * s).to(dtype).to(tl.float32)

    q_dst = q_out_ptr + (tok * Hq + heads[:, None]) * D + offs[None, :]
    q_tile = is_q[:, None] & in_half[None, :]
    tl.store(q_dst, o1.to(dtype), mask=q_tile)
    tl.store(q_dst + HALF, o2.to(dtype), mask=q_tile)

    # K and V of kv head j = row - Hq go to cache row (b, j, pos).
    kv_tile = is_k[:, None] & in_half[None, :] & in_table & (pos < S)
    row = ((b * Hkv + (heads - Hq)) * S + pos) * D  # [BLOCK_H]
    dst = row[:, None] + offs[None, :]
    tl.store(k_cache_ptr + dst, o1.to(cache_dtype), mask=kv_tile)
    tl.store(k_cache_ptr + dst + HALF, o2.to(cache_dtype), mask=kv_tile)
    v_src = src + Hkv * D
    v1 = tl.load(v_src, mask=kv_tile, other=0.0)
    v2 = tl.load(v_src + HALF, mask=kv_tile, other=0.0)
    tl.store(v_cache_ptr + dst, v1.to(cache_dtype), mask=kv_tile)
    tl.store(v_cache_ptr + dst + HALF, v2.to(cache_dtype), mask=kv_tile)
