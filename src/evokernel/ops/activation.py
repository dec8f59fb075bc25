"""Launcher for the SiLU-and-multiply kernel (kernels/activation.py).

silu_mul(gate_up [N, 2I]) -> [N, I], as ops/reference.py.
"""

from __future__ import annotations

import torch

from evokernel.ops.grid import cdiv, next_pow2

BLOCK = 1024  # elements of the output row per program


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    from evokernel.kernels.activation import silu_mul_kernel

    assert gate_up.is_contiguous(), "silu_mul: gate_up must be contiguous"
    assert gate_up.shape[-1] % 2 == 0, tuple(gate_up.shape)
    inter = gate_up.shape[-1] // 2
    rows = gate_up.view(-1, 2 * inter)  # [N, 2I]
    out = torch.empty((rows.shape[0], inter), device=gate_up.device, dtype=gate_up.dtype)
    block = min(BLOCK, next_pow2(inter))
    grid = (rows.shape[0], cdiv(inter, block))
    silu_mul_kernel[grid](rows, out, rows.stride(0), out.stride(0), inter, BLOCK=block, num_warps=4)
    return out.view(*gate_up.shape[:-1], inter)
