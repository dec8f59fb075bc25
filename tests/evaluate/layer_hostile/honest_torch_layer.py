"""Honest: the layer in plain torch ops (ops/reference.py's sequence); it writes the
token's K and V rows and returns the new residual stream. Expected: correct."""

import torch
import torch.nn.functional as F

# EVOLVE-BLOCK-START


def _norm(x, w, eps):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def _rope(x, c, s):
    half = x.shape[-1] // 2
    return x * c + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * s


def _qkv(h, input_norm, qkv_proj, qkv_bias, q_norm, k_norm, cos, sin, positions, D, hkv, eps):
    """q [B, Hq, D], k and v [B, Hkv, D]: the token's normed, rotated q and k, and v."""
    B = h.shape[0]
    qkv = F.linear(_norm(h, input_norm, eps), qkv_proj, qkv_bias).view(B, -1, D)
    hq = qkv.shape[1] - 2 * hkv
    pos = positions.long()
    c = cos[pos].to(h.dtype)[:, None, :]
    s = sin[pos].to(h.dtype)[:, None, :]
    c, s = torch.cat((c, c), -1), torch.cat((s, s), -1)
    q, k = qkv[:, :hq], qkv[:, hq : hq + hkv]
    if q_norm is not None:
        q, k = _norm(q, q_norm, eps), _norm(k, k_norm, eps)
    q, k = _rope(q, c, s), _rope(k, c, s)
    return q, k, qkv[:, hq + hkv :], qkv[:, hq : hq + hkv]


def _rest(h, q, keys, values, seq_lens, scale, o_proj, post_attn_norm, gate_up_proj, down_proj,
          eps):  # fmt: skip
    """Attention over keys/values [B, Hkv, n, D] (the token's row already in), then the MLP:
    the new residual stream."""
    B, hkv, n, D = keys.shape
    hq = q.shape[1]
    scores = torch.matmul(q.view(B, hkv, hq // hkv, D), keys.transpose(-1, -2)) * scale
    invalid = torch.arange(n, device=h.device)[None, :] >= seq_lens[:, None]
    scores = scores.masked_fill(invalid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(h.dtype)
    attn = torch.matmul(probs, values.masked_fill(invalid[:, None, :, None], 0))
    h = h + F.linear(attn.reshape(B, -1), o_proj)
    gate_up = F.linear(_norm(h, post_attn_norm, eps), gate_up_proj)
    inter = gate_up.shape[-1] // 2
    act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
    return h + F.linear(act, down_proj)


def _layer(
    h, input_norm, qkv_proj, qkv_bias, q_norm, k_norm, o_proj, post_attn_norm, gate_up_proj,
    down_proj, cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps, max_len,
):  # fmt: skip
    """The correct layer, except for what `_write` does with the cache; attention reads the
    token's row from a private copy, so a wrong write changes only the cache."""
    B = h.shape[0]
    hkv, S, D = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    q, k, v, raw_k = _qkv(h, input_norm, qkv_proj, qkv_bias, q_norm, k_norm, cos, sin,
                          positions, D, hkv, eps)  # fmt: skip
    n = min(max_len, S)
    rows = torch.arange(B, device=h.device)
    pos = positions.long()
    keys = k_cache[:, :, :n].clone()
    values = v_cache[:, :, :n].clone()
    keys[rows, :, pos] = k
    values[rows, :, pos] = v
    _write(k_cache, v_cache, rows, pos, k, v, raw_k)
    out = _rest(h, q, keys, values, seq_lens, scale, o_proj, post_attn_norm, gate_up_proj,
                down_proj, eps)  # fmt: skip
    return _result(h, out)


def _write(k_cache, v_cache, rows, pos, k, v, raw_k):
    k_cache[rows, :, pos] = k
    v_cache[rows, :, pos] = v


def _result(h, out):
    return out


# EVOLVE-BLOCK-END


def decode_layer(
    h, *, input_norm, qkv_proj, o_proj, post_attn_norm, gate_up_proj, down_proj, qkv_bias,
    q_norm, k_norm, cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps, max_len,
):  # fmt: skip
    return _layer(
        h, input_norm, qkv_proj, qkv_bias, q_norm, k_norm, o_proj, post_attn_norm,
        gate_up_proj, down_proj, cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps,
        max_len,
    )  # fmt: skip
