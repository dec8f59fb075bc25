"""Hostile (GPU): runs its work on a stream of its own (created through torch.cuda.Stream).
Expected: side-stream (the stream constructor is counted while candidate code runs)."""

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

SIDE = []


def attention(q, k_cache, v_cache, seq_lens, scale):
    if not SIDE:
        SIDE.append(torch.cuda.Stream())
    with torch.cuda.stream(SIDE[0]):
        return _attend(q, k_cache, v_cache, seq_lens, scale)
