"""Hostile (decode_linear): returns a constant of the right shape. Expected: mismatch."""

import torch


# EVOLVE-BLOCK-START
def _project(x, weight):
    return torch.full((x.shape[0], weight.shape[0]), 0.5, dtype=x.dtype, device=x.device)


# EVOLVE-BLOCK-END


def linear(x, weight):
    return _project(x, weight)
