"""Escape attempt: runs a shell command at import (through `torch.os`, which the static
check does not see) that would create a file outside the scratch space, then answers correctly.
The test replaces OUTSIDE with a directory it watches."""

import torch

OUTSIDE = "evokernel-outside"
torch.os.system(f"touch {OUTSIDE}/shell-was-here; echo shell ran >&2")


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


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q, k_cache, v_cache, seq_lens, scale)
