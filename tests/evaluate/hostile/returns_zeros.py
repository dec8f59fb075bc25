"""Hostile: returns a constant (zeros). Expected: mismatch."""

import torch


# EVOLVE-BLOCK-START
def _attend(q):
    return torch.zeros_like(q)


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q)
