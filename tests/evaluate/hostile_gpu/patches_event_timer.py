"""Hostile (GPU): makes every CUDA event interval read as 1 ns. Expected: patched (the harness
times with references captured before the import, so the figures are unaffected)."""

import torch
import torch.nn.functional as F


# EVOLVE-BLOCK-START
def _attend(q, k_cache, v_cache, seq_lens, scale):
    B = q.shape[0]
    out = torch.empty_like(q)
    for b in range(B):
        n = int(seq_lens[b])
        k = k_cache[b : b + 1, :, :n]
        v = v_cache[b : b + 1, :, :n]
        o = F.scaled_dot_product_attention(
            q[b : b + 1, :, None], k, v, scale=scale, enable_gqa=True
        )
        out[b] = o[0, :, 0]
    return out


# EVOLVE-BLOCK-END

torch.cuda.Event.elapsed_time = lambda self, end: 1e-6


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q, k_cache, v_cache, seq_lens, scale)
