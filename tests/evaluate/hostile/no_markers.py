"""Hostile: no EVOLVE-BLOCK region. Expected: static."""

import torch


def attention(q, k_cache, v_cache, seq_lens, scale):
    return torch.zeros_like(q)
