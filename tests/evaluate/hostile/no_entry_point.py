"""Hostile: defines no `attention`. Expected: load."""

import torch


# EVOLVE-BLOCK-START
def attend(q, k_cache, v_cache, seq_lens, scale):
    return torch.zeros_like(q)


# EVOLVE-BLOCK-END
