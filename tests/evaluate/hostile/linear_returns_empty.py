"""Hostile (decode_linear): returns torch.empty of the right shape. Expected: not-finite."""

import torch


# EVOLVE-BLOCK-START
def _project(x, weight):
    return torch.empty((x.shape[0], weight.shape[0]), dtype=x.dtype, device=x.device)


# EVOLVE-BLOCK-END


def linear(x, weight):
    return _project(x, weight)
