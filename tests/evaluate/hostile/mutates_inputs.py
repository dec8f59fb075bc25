"""Hostile: computes the right answer, then overwrites the last cache position.
Expected: input-mutated."""

import torch


# EVOLVE-BLOCK-START
def _attend(q, k_cache, v_cache, seq_lens, scale):
    B, Hq, D = q.shape
    Hkv = k_cache.shape[1]
    group = Hq // Hkv
    out = torch.empty_like(q)
    for b in range(B):
        n = int(seq_lens[b])
        k = k_cache[b, :, :n].float()  # [Hkv, n, D]
        v = v_cache[b, :, :n].float()
        qb = q[b].float().view(Hkv, group, D)  # query head h reads kv head h // group
        s = torch.einsum("kgd,knd->kgn", qb, k) * scale
        p = torch.softmax(s, dim=-1)
        out[b] = torch.einsum("kgn,knd->kgd", p, v).reshape(Hq, D).to(q.dtype)
    return out


def _scribble(k_cache):
    k_cache[:, :, -1].fill_(0.0)


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    out = _attend(q, k_cache, v_cache, seq_lens, scale)
    _scribble(k_cache)
    return out
