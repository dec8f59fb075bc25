"""Seed candidate for `gqa_decode_attention`: one decode step of grouped-query attention.

Plain flash-decoding in two Triton kernels:

  1. `_decode_split`: program (b * Hq + h, s) reads query head h of sequence b and walks the
     s-th of SPLIT equal chunks of the valid positions [0, seq_lens[b]) of kv head
     h // (Hq // Hkv) in BLOCK_N-row tiles, with an online softmax in float32. Positions past
     seq_lens[b] are never read: K/V loads are masked (other=0) and masked scores are -inf.
     With SPLIT == 1 it normalises and writes the output directly.
  2. `_decode_combine` (SPLIT > 1 only): program b * Hq + h merges the SPLIT partial results
     (normalised acc [D] and log-sum-exp) of the non-empty chunks.

Why split: at B=1 with 16 query heads a single pass runs 16 programs on a GPU with 132 SMs;
splitting the sequence fills the machine (the knob SPLIT). The grid depends on shapes only
(B, Hq, SPLIT) and the chunk bounds are computed on the device from seq_lens, so the call has no
host sync and can be captured in a CUDA graph.

Bytes per call (dtype size e): q B*Hq*D*e + K and V 2*sum(seq_lens)*Hkv*D*e (each kv head is
read by Hq // Hkv programs; the second read mostly hits L2) + out B*Hq*D*e; with SPLIT > 1 the
float32 partials add B*Hq*SPLIT*(D + 1)*4 written and read once.
"""

import torch
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
BLOCK_N = 64  # tune: 32, 64, 128
NUM_WARPS = 4  # tune: 2, 4, 8
SPLIT = 1  # tune: 1, 4, 8, 16, 32, 64
NUM_STAGES = 2


@triton.jit
def _decode_split(
    q_ptr,
    k_ptr,
    v_ptr,
    seq_lens_ptr,
    out_ptr,
    part_ptr,
    lse_ptr,
    scale,
    HQ,
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
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
):
    pid_bh = tl.program_id(0)  # b * Hq + h
    pid_s = tl.program_id(1)  # chunk index in [0, SPLIT)
    b = pid_bh // HQ
    h = pid_bh % HQ
    kvh = h // GROUP

    seq_len = tl.load(seq_lens_ptr + b)
    chunk = tl.cdiv(seq_len, SPLIT)
    start = pid_s * chunk
    end = tl.minimum(start + chunk, seq_len)

    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_d, mask=mask_d, other=0.0)
    q = q.to(tl.float32) * scale  # [BLOCK_D]

    k_base = k_ptr + b * stride_kb + kvh * stride_kh
    v_base = v_ptr + b * stride_vb + kvh * stride_vh

    m_i = -float("inf")  # running max of the scores
    l_i = 0.0  # running sum of exp(score - m_i)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)  # running sum of exp(score - m_i) * v

    if end > start:
        for n0 in range(start, end, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            mask_n = offs_n < end
            mask_nd = mask_n[:, None] & mask_d[None, :]
            k = tl.load(
                k_base + offs_n[:, None] * stride_ks + offs_d[None, :], mask=mask_nd, other=0.0
            )
            s = tl.sum(k.to(tl.float32) * q[None, :], axis=1)  # [BLOCK_N]
            s = tl.where(mask_n, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=0))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new)
            v = tl.load(
                v_base + offs_n[:, None] * stride_vs + offs_d[None, :], mask=mask_nd, other=0.0
            )
            acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
            l_i = l_i * alpha + tl.sum(p, axis=0)
            m_i = m_new

        if SPLIT == 1:
            out = acc / l_i
            o_ptrs = out_ptr + b * stride_ob + h * stride_oh + offs_d
            tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_d)
        else:
            row = pid_bh * SPLIT + pid_s
            tl.store(part_ptr + row * BLOCK_D + offs_d, acc / l_i, mask=mask_d)
            tl.store(lse_ptr + row, m_i + tl.log(l_i))


@triton.jit
def _decode_combine(
    seq_lens_ptr,
    part_ptr,
    lse_ptr,
    out_ptr,
    HQ,
    stride_ob,
    stride_oh,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SPLIT: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    b = pid_bh // HQ
    h = pid_bh % HQ
    seq_len = tl.load(seq_lens_ptr + b)
    chunk = tl.cdiv(seq_len, SPLIT)

    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for s in range(0, SPLIT):
        # The same chunk bounds as _decode_split: empty chunks wrote nothing and are skipped.
        if s * chunk < seq_len:
            row = pid_bh * SPLIT + s
            part = tl.load(part_ptr + row * BLOCK_D + offs_d, mask=mask_d, other=0.0)
            lse = tl.load(lse_ptr + row)
            m_new = tl.maximum(m_i, lse)
            alpha = tl.exp(m_i - m_new)
            w = tl.exp(lse - m_new)
            acc = acc * alpha + w * part
            l_i = l_i * alpha + w
            m_i = m_new
    out = acc / l_i
    o_ptrs = out_ptr + b * stride_ob + h * stride_oh + offs_d
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_d)


def _launch(q, k_cache, v_cache, seq_lens, scale):
    B, Hq, D = q.shape
    Hkv = k_cache.shape[1]
    block_d = triton.next_power_of_2(D)
    out = torch.empty((B, Hq, D), device=q.device, dtype=q.dtype)
    if SPLIT == 1:
        part = out  # unused by the SPLIT == 1 kernel
        lse = out
    else:
        # [B*Hq*SPLIT, BLOCK_D] and [B*Hq*SPLIT] float32; rows of empty chunks stay unwritten
        # and unread.
        part = torch.empty((B * Hq * SPLIT, block_d), device=q.device, dtype=torch.float32)
        lse = torch.empty((B * Hq * SPLIT,), device=q.device, dtype=torch.float32)
    _decode_split[(B * Hq, SPLIT)](
        q,
        k_cache,
        v_cache,
        seq_lens,
        out,
        part,
        lse,
        scale,
        Hq,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        out.stride(0),
        out.stride(1),
        GROUP=Hq // Hkv,
        D=D,
        BLOCK_D=block_d,
        BLOCK_N=BLOCK_N,
        SPLIT=SPLIT,
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )
    if SPLIT > 1:
        _decode_combine[(B * Hq,)](
            seq_lens,
            part,
            lse,
            out,
            Hq,
            out.stride(0),
            out.stride(1),
            D=D,
            BLOCK_D=block_d,
            SPLIT=SPLIT,
            num_warps=4,
        )
    return out


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    """One decode step of grouped-query attention.

    q:        [B, Hq, D]          the new token's queries
    k_cache:  [B, Hkv, S_max, D]  keys; positions >= seq_lens[b] hold junk and must be ignored
    v_cache:  [B, Hkv, S_max, D]  values, same layout
    seq_lens: [B] int32           valid positions per sequence, 1 <= seq_lens[b] <= S_max
    scale:    float               softmax scale, usually D ** -0.5
    returns   [B, Hq, D] in q's dtype; query head h reads kv head h // (Hq // Hkv)
    """
    assert q.dim() == 3 and k_cache.dim() == 4, "q [B, Hq, D], k_cache [B, Hkv, S_max, D]"
    assert v_cache.shape == k_cache.shape, "v_cache must have k_cache's shape"
    B, Hq, D = q.shape
    assert k_cache.shape[0] == B and k_cache.shape[3] == D, "k_cache [B, Hkv, S_max, D]"
    assert Hq % k_cache.shape[1] == 0, "Hq must be a multiple of Hkv"
    assert k_cache.dtype == q.dtype and v_cache.dtype == q.dtype, "q, K, V share a dtype"
    assert q.stride(2) == 1 and k_cache.stride(3) == 1 and v_cache.stride(3) == 1, "last dim"
    assert seq_lens.shape == (B,) and seq_lens.dtype == torch.int32, "seq_lens [B] int32"
    assert seq_lens.device == q.device, "seq_lens on q's device"
    return _launch(q, k_cache, v_cache, seq_lens, float(scale))
