"""Hostile: returns torch.empty() (whatever memory held). Expected: not-finite (poisoned)."""

import torch


# EVOLVE-BLOCK-START
def _attend(q):
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q)
