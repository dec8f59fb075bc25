"""Pure-PyTorch implementations of every engine op: the references and the `torch` OpSet.

Device-generic (CPU float32, CUDA bfloat16) and graph-safe: no host syncs, no shapes that
depend on tensor values. Each op rounds where Hugging Face transformers' Qwen3 rounds (norms
in float32 then back to the model dtype, softmax in float32), so in float32 the engine matches
transformers to float32 noise and in bfloat16 it makes the same rounding steps.

Shapes (N tokens = B sequences x T tokens each, H hidden, D head_dim, S = S_max):
  embed(weight [V, H], ids [N] int64)                                  -> [N, H]
  rms_norm(x [N, H], weight [H], eps)                                  -> [N, H]
  residual_add(x [N, H], residual [N, H], weight [H], eps)             -> (h [N, H], norm(h))
  silu_mul(gate_up [N, 2I])                                            -> [N, I]
  linear(x [M, K], weight [N, K] (a Weight), bias [N] | None)          -> [M, N]
  logits(x [N, H], lm_head [V, H])                                     -> [N, V] float32
  qk_norm_rope_append(qkv [B, T, (Hq+2Hkv)*D], q_norm [D] | None, k_norm [D] | None,
                      cos [P, D/2] f32,
                      sin [P, D/2] f32, positions [B, T] int32, k_cache, v_cache, eps)
                                                                       -> q [B, T, Hq, D]
  decode_attention(q [B, Hq, D], k_cache, v_cache, seq_lens [B] int32, scale) -> [B, Hq, D]
  prefill_attention(q [B, T, Hq, D], k_cache, v_cache, scale)          -> [B, T, Hq, D]

The decode step's fused ops (ops/compose.py) are compositions of these.
Caches are `[B, Hkv, S, D]` (engine/cache.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from evokernel.model.weights import Weight, dense


def embed(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.embedding(ids, weight)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # transformers: normalize in float32, round to the input dtype, then scale in that dtype.
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def residual_add(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    h = residual + x
    return h, rms_norm(h, weight, eps)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    inter = gate_up.shape[-1] // 2
    return F.silu(gate_up[..., :inter]) * gate_up[..., inter:]


def linear(x: torch.Tensor, weight: Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    # A packed weight is dequantized to x's dtype first: its format's reference.
    return F.linear(x, dense(weight, x.dtype), bias)


def logits(x: torch.Tensor, lm_head: Weight) -> torch.Tensor:
    # In the model dtype, like transformers' lm_head, then widened for sampling and KL.
    return F.linear(x, dense(lm_head, x.dtype)).float()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def qk_norm_rope_append(
    qkv: torch.Tensor,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    B, T, width = qkv.shape
    hkv, D = k_cache.shape[1], k_cache.shape[3]
    hq = width // D - 2 * hkv
    heads = qkv.view(B, T, hq + 2 * hkv, D)
    q = heads[:, :, :hq]  # [B, T, Hq, D]
    k = heads[:, :, hq : hq + hkv]  # [B, T, Hkv, D]
    if q_norm is not None and k_norm is not None:  # qwen3's per-head norms
        q, k = rms_norm(q, q_norm, eps), rms_norm(k, k_norm, eps)
    v = heads[:, :, hq + hkv :]  # [B, T, Hkv, D]
    pos = positions.long()
    c = cos[pos].to(qkv.dtype).unsqueeze(2)  # [B, T, 1, D/2]
    s = sin[pos].to(qkv.dtype).unsqueeze(2)
    c, s = torch.cat((c, c), dim=-1), torch.cat((s, s), dim=-1)
    q = q * c + _rotate_half(q) * s
    k = k * c + _rotate_half(k) * s
    # cache[b, :, pos[b, t], :] = k[b, t]; advanced indices on dims 0 and 2 put [B, T] first.
    rows = torch.arange(B, device=qkv.device).unsqueeze(1).expand(B, T)
    k_cache[rows, :, pos] = k.to(k_cache.dtype)
    v_cache[rows, :, pos] = v.to(v_cache.dtype)
    return q.contiguous()


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    # Reads all S positions and masks by seq_lens (no host sync, so it is graph-capturable);
    # junk past seq_lens never reaches the output, even NaN (masked out of V as well).
    B, hq, D = q.shape
    hkv, S = k_cache.shape[1], k_cache.shape[2]
    qg = q.view(B, hkv, hq // hkv, D)  # query head h reads kv head h // (Hq // Hkv)
    scores = torch.matmul(qg, k_cache.transpose(-1, -2)) * scale  # [B, Hkv, G, S]
    invalid = torch.arange(S, device=q.device).unsqueeze(0) >= seq_lens.unsqueeze(1)  # [B, S]
    scores = scores.masked_fill(invalid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    values = v_cache.masked_fill(invalid[:, None, :, None], 0)
    return torch.matmul(probs, values).reshape(B, hq, D)


def prefill_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, scale: float
) -> torch.Tensor:
    # Causal over cache positions 0..T-1 (a fresh prompt); right-padded rows only attend to
    # earlier positions, so padding never reaches a real token.
    T = q.shape[1]
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        k_cache[:, :, :T],
        v_cache[:, :, :T],
        is_causal=True,
        scale=scale,
        enable_gqa=True,
    )
    return out.transpose(1, 2)
