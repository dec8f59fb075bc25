"""A correct `decode_layer` program made of the engine's torch reference ops (the same torch
calls as ops/reference.py, inlined: a pack program imports only what the evaluator's static
check allows), so the engine's tokens do not change. It counts its calls by context bound in
CALLS and returns a new tensor (h is left as it was). Read as text by the pack tests and the
decode_layer op tests."""

import torch
import torch.nn.functional as F

CALLS = []


def _rms_norm(x, weight, eps):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def decode_layer(
    h,
    *,
    input_norm,
    qkv_proj,
    o_proj,
    post_attn_norm,
    gate_up_proj,
    down_proj,
    qkv_bias,
    q_norm,
    k_norm,
    cos,
    sin,
    positions,
    k_cache,
    v_cache,
    seq_lens,
    scale,
    eps,
    max_len,
):
    CALLS.append(int(max_len))
    B = h.shape[0]
    hkv, D = k_cache.shape[1], k_cache.shape[3]
    qkv = F.linear(_rms_norm(h, input_norm, eps), qkv_proj, qkv_bias)
    hq = qkv.shape[-1] // D - 2 * hkv
    heads = qkv.view(B, 1, hq + 2 * hkv, D)
    q, k = heads[:, :, :hq], heads[:, :, hq : hq + hkv]
    if q_norm is not None:
        q, k = _rms_norm(q, q_norm, eps), _rms_norm(k, k_norm, eps)
    v = heads[:, :, hq + hkv :]
    pos = positions.view(B, 1).long()
    c = cos[pos].to(qkv.dtype).unsqueeze(2)
    s = sin[pos].to(qkv.dtype).unsqueeze(2)
    c, s = torch.cat((c, c), dim=-1), torch.cat((s, s), dim=-1)
    q = (q * c + _rotate_half(q) * s).contiguous()
    k = k * c + _rotate_half(k) * s
    rows = torch.arange(B, device=qkv.device).unsqueeze(1).expand(B, 1)
    k_cache[rows, :, pos] = k.to(k_cache.dtype)
    v_cache[rows, :, pos] = v.to(v_cache.dtype)

    n = min(max_len, k_cache.shape[2])
    keys, values = k_cache[:, :, :n], v_cache[:, :, :n]
    qg = q.view(B, hkv, hq // hkv, D)
    scores = torch.matmul(qg, keys.transpose(-1, -2)) * scale
    invalid = torch.arange(n, device=q.device).unsqueeze(0) >= seq_lens.unsqueeze(1)
    scores = scores.masked_fill(invalid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    values = values.masked_fill(invalid[:, None, :, None], 0)
    attn = torch.matmul(probs, values).reshape(B, hq * D)

    h = h + F.linear(attn, o_proj)
    gate_up = F.linear(_rms_norm(h, post_attn_norm, eps), gate_up_proj)
    inter = gate_up.shape[-1] // 2
    return h + F.linear(F.silu(gate_up[..., :inter]) * gate_up[..., inter:], down_proj)
