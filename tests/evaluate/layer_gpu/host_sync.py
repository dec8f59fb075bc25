"""A correct decode layer in plain torch ops that reads the longest sequence length back to
the host (`int(seq_lens.max())`) to size attention: right in eager calls, impossible to
capture in a CUDA graph. The engine replays its layers from graphs, so the evaluator must
reject it (`graph-capture`) in the timed phase."""

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


def decode_layer(
    h, input_norm, qkv_proj, q_norm, k_norm, o_proj, post_attn_norm, gate_up_proj,
    down_proj, cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps, max_len,
):  # fmt: skip
    B = h.shape[0]
    hkv, D = k_cache.shape[1], k_cache.shape[3]
    qkv = F.linear(_norm(h, input_norm, eps), qkv_proj).view(B, -1, D)
    hq = qkv.shape[1] - 2 * hkv
    pos = positions.long()
    c = cos[pos].to(h.dtype)[:, None, :]
    s = sin[pos].to(h.dtype)[:, None, :]
    c, s = torch.cat((c, c), -1), torch.cat((s, s), -1)
    q = _rope(_norm(qkv[:, :hq], q_norm, eps), c, s)
    k = _rope(_norm(qkv[:, hq : hq + hkv], k_norm, eps), c, s)
    rows = torch.arange(B, device=h.device)
    k_cache[rows, :, pos] = k
    v_cache[rows, :, pos] = qkv[:, hq + hkv :]
    n = int(seq_lens.max())  # the host sync
    keys, values = k_cache[:, :, :n], v_cache[:, :, :n]
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


# EVOLVE-BLOCK-END
