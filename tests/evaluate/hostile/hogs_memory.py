"""Hostile: allocates (and touches) host memory until stopped. Expected: memory-budget."""

import torch


# EVOLVE-BLOCK-START
def _attend(q):
    hoard = []
    for _ in range(64):
        hoard.append(torch.ones(256 * 2**20 // 4))  # 256 MiB each, 16 GiB in all
    return q


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q)
