"""Seed candidate for `gqa_decode_attention`: one decode step of grouped-query attention.

Split-KV flash-decoding that reads each K/V row once for every query head sharing it (the
engine's own attention, kernels/attention.py, without its fused q/k prep), in two kernels:

  1. `_attend`: program (b * Hkv + j, s) serves kv head j of sequence b and all GROUP =
     Hq / Hkv query heads mapped to it (query head h reads kv head h // GROUP). It walks the
     s-th of SPLIT equal chunks (a multiple of BLOCK_N positions) of the valid positions
     [0, seq_lens[b]) in BLOCK_N-row tiles with an online softmax in float32 and base-2
     exponentials; the GROUP query rows are padded to BLOCK_G >= 16 rows so that the score and
     value products run on tensor cores. K/V loads are masked at seq_lens[b] (other=0) and
     masked scores are -inf, so junk past seq_lens is never used. With SPLIT == 1 it
     normalises and writes the output itself.
  2. `_combine` (SPLIT > 1): program b * Hq + h merges the partial outputs (normalised acc [D]
     and log2-sum-exp) of the non-empty chunks.

SPLIT is chosen on the host from the cache length S_max (a bound on seq_lens): 1 up to
DIRECT_MAX positions (no combine kernel), beyond that chunks of at least MIN_CHUNK positions
with at most two programs per SM. The tile loads sit at the top of the loop so that Triton's
software pipelining keeps NUM_STAGES tiles in flight per program. The grid depends on shapes
only and the chunk bounds are computed on the device from seq_lens: no host sync,
graph-capturable.

Bytes per call (dtype size e): q B*Hq*D*e + K and V 2*sum(seq_lens)*Hkv*D*e (read once) + out
B*Hq*D*e; with SPLIT > 1 the float32 partials add B*Hq*SPLIT*(D + 1)*4 written and read once.
"""

import torch
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
BLOCK_N = 64  # tune: 32, 64, 128
MIN_CHUNK = 64  # tune: 64, 128
NUM_STAGES = 3  # tune: 2, 3, 4
DIRECT_MAX = 256  # tune: 128, 256, 512
NUM_WARPS = 4
PROGRAMS_PER_SM = 2


@triton.jit
def _kv_tile(base, offs_n, offs_h, end, stride_s, HALF: tl.constexpr):
    """Rows offs_n (< end) of one kv head as two [BLOCK_N, HALF] halves (0 where masked)."""
    mask = (offs_n < end)[:, None]
    kv_ptrs = base + offs_n[:, None].to(tl.int64) * stride_s + offs_h[None, :]
    lo = tl.load(kv_ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
    hi = tl.load(kv_ptrs + HALF, mask=mask, other=0.0, eviction_policy="evict_first")
    return lo, hi


@triton.jit
def _dot(a, b, IEEE: tl.constexpr):
    if IEEE:
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _attend(
    q_ptr,
    k_ptr,
    v_ptr,
    seq_lens_ptr,
    out_ptr,
    part_ptr,
    lse_ptr,
    scale,
    SPLIT,
    Hkv,
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
    DIRECT: tl.constexpr,
    IEEE: tl.constexpr,
):
    HALF: tl.constexpr = D // 2
    pid = tl.program_id(0)
    split = tl.program_id(1)
    b = pid // Hkv
    j = pid % Hkv
    dtype = k_ptr.dtype.element_ty

    seq_len = tl.load(seq_lens_ptr + b)
    chunk = tl.cdiv(tl.cdiv(seq_len, SPLIT), BLOCK_N) * BLOCK_N
    start = split * chunk
    end = tl.minimum(start + chunk, seq_len)

    offs_h = tl.arange(0, HALF)
    offs_g = tl.arange(0, BLOCK_G)
    heads = j * GROUP + offs_g
    in_group = (offs_g < GROUP)[:, None]
    k_base = k_ptr + b.to(tl.int64) * stride_kb + j * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + j * stride_vh
    q_rows = q_ptr + b.to(tl.int64) * stride_qb + heads[:, None] * stride_qh + offs_h[None, :]
    q_lo = tl.load(q_rows, mask=in_group, other=0.0)
    q_hi = tl.load(q_rows + HALF, mask=in_group, other=0.0)

    qk_scale = scale * 1.4426950408889634  # scores in log2 units
    m_i = tl.full([BLOCK_G], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc_lo = tl.zeros([BLOCK_G, HALF], tl.float32)
    acc_hi = tl.zeros([BLOCK_G, HALF], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        # Loads at the top of the loop: Triton pipelines them NUM_STAGES tiles deep.
        offs_n = n0 + tl.arange(0, BLOCK_N)
        k_lo, k_hi = _kv_tile(k_base, offs_n, offs_h, end, stride_ks, HALF)
        v_lo, v_hi = _kv_tile(v_base, offs_n, offs_h, end, stride_vs, HALF)
        scores = _dot(q_lo, tl.trans(k_lo), IEEE) + _dot(q_hi, tl.trans(k_hi), IEEE)
        scores = tl.where((offs_n < end)[None, :], scores * qk_scale, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        pv = p.to(dtype)
        acc_lo = acc_lo * alpha[:, None] + _dot(pv, v_lo, IEEE)
        acc_hi = acc_hi * alpha[:, None] + _dot(pv, v_hi, IEEE)
        m_i = m_new

    if DIRECT:
        o_rows = out_ptr + b.to(tl.int64) * stride_ob + heads[:, None] * stride_oh + offs_h[None, :]
        tl.store(o_rows, (acc_lo / l_i[:, None]).to(dtype), mask=in_group)
        tl.store(o_rows + HALF, (acc_hi / l_i[:, None]).to(dtype), mask=in_group)
    else:
        row = (b * Hkv * GROUP + heads) * SPLIT + split
        empty = l_i == 0.0
        safe_l = tl.where(empty, 1.0, l_i)
        dst = part_ptr + row[:, None].to(tl.int64) * D + offs_h[None, :]
        tl.store(dst, acc_lo / safe_l[:, None], mask=in_group)
        tl.store(dst + HALF, acc_hi / safe_l[:, None], mask=in_group)
        lse = tl.where(empty, -float("inf"), m_i + tl.log2(safe_l))
        tl.store(lse_ptr + row, lse, mask=offs_g < GROUP)


@triton.jit
def _combine(
    part_ptr,
    lse_ptr,
    out_ptr,
    Hq,
    SPLIT,
    stride_ob,
    stride_oh,
    D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    row = tl.program_id(0)
    b = row // Hq
    h = row % Hq
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, D)
    lse = tl.load(lse_ptr + row * SPLIT + offs_s, mask=offs_s < SPLIT, other=-float("inf"))
    w = tl.exp2(lse - tl.max(lse, axis=0))  # 0 for empty chunks
    parts = tl.load(
        part_ptr + (row * SPLIT + offs_s[:, None]).to(tl.int64) * D + offs_d[None, :],
        mask=((offs_s < SPLIT) & (w > 0))[:, None],
        other=0.0,
    )
    out = tl.sum(parts * w[:, None], axis=0) / tl.sum(w, axis=0)
    tl.store(
        out_ptr + b.to(tl.int64) * stride_ob + h * stride_oh + offs_d,
        out.to(out_ptr.dtype.element_ty),
    )


def _split(s_max, programs_per_split, device):
    if s_max <= DIRECT_MAX:
        return 1
    sms = (
        torch.cuda.get_device_properties(device).multi_processor_count
        if device.type == "cuda"
        else 4
    )
    want = triton.cdiv(s_max, MIN_CHUNK)
    cap = max(1, PROGRAMS_PER_SM * sms // programs_per_split)
    split = min(want, cap, 64)
    return 1 << (split.bit_length() - 1)


def _launch(q, k_cache, v_cache, seq_lens, scale):
    B, Hq, D = q.shape
    Hkv, S = k_cache.shape[1], k_cache.shape[2]
    group = Hq // Hkv
    split = _split(S, B * Hkv, q.device)
    out = torch.empty((B, Hq, D), device=q.device, dtype=q.dtype)
    if split == 1:
        part = lse = out  # unused
    else:
        part = torch.empty((B * Hq, split, D), device=q.device, dtype=torch.float32)
        lse = torch.empty((B * Hq, split), device=q.device, dtype=torch.float32)
    _attend[(B * Hkv, split)](
        q,
        k_cache,
        v_cache,
        seq_lens,
        out,
        part,
        lse,
        scale,
        split,
        Hkv,
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
        GROUP=group,
        D=D,
        BLOCK_G=max(16, triton.next_power_of_2(group)),
        BLOCK_N=BLOCK_N,
        DIRECT=split == 1,
        IEEE=q.dtype == torch.float32,
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )
    if split > 1:
        _combine[(B * Hq,)](
            part,
            lse,
            out,
            Hq,
            split,
            out.stride(0),
            out.stride(1),
            D=D,
            BLOCK_S=triton.next_power_of_2(split),
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
    assert D >= 32 and D & (D - 1) == 0, "head_dim must be a power of two >= 32"
    assert k_cache.dtype == q.dtype and v_cache.dtype == q.dtype, "q, K, V share a dtype"
    assert q.stride(2) == 1 and k_cache.stride(3) == 1 and v_cache.stride(3) == 1, "last dim"
    assert seq_lens.shape == (B,) and seq_lens.dtype == torch.int32, "seq_lens [B] int32"
    assert seq_lens.device == q.device, "seq_lens on q's device"
    return _launch(q, k_cache, v_cache, seq_lens, float(scale))
