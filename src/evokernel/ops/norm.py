"""Launchers for the RMSNorm kernels (kernels/norm.py): `rms_norm` and `residual_add`.

Same signatures and results as ops/reference.py. x may have leading dims; its rows must be
contiguous. One program per row, the whole row in registers (H up to a few thousand).
"""

from __future__ import annotations

import torch

from evokernel.ops.grid import next_pow2, row_warps


def _check(x: torch.Tensor, weight: torch.Tensor) -> int:
    H = x.shape[-1]
    assert x.is_contiguous(), "rms_norm: x must be contiguous"
    assert weight.shape == (H,) and weight.is_contiguous(), (tuple(weight.shape), H)
    assert x.dtype == weight.dtype, (x.dtype, weight.dtype)
    assert x.device == weight.device, (x.device, weight.device)
    return H


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    from evokernel.kernels.norm import rms_norm_kernel

    H = _check(x, weight)
    rows = x.view(-1, H)  # [N, H]
    out = torch.empty_like(rows)
    block = next_pow2(H)
    rms_norm_kernel[(rows.shape[0],)](
        rows, weight, out, rows.stride(0), out.stride(0), H, eps,
        BLOCK_H=block, num_warps=row_warps(block),
    )  # fmt: skip
    return out.view(x.shape)


def residual_add(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(residual + x, rms_norm(residual + x)) in one pass over the row."""
    from evokernel.kernels.norm import add_rms_norm_kernel

    H = _check(x, weight)
    assert residual.shape == x.shape and residual.is_contiguous(), "residual: shape/layout"
    assert residual.dtype == x.dtype, (residual.dtype, x.dtype)
    xs, rs = x.view(-1, H), residual.view(-1, H)  # [N, H]
    total = torch.empty_like(xs)
    normed = torch.empty_like(xs)
    block = next_pow2(H)
    add_rms_norm_kernel[(xs.shape[0],)](
        xs, rs, weight, total, normed,
        xs.stride(0), rs.stride(0), total.stride(0), normed.stride(0), H, eps,
        BLOCK_H=block, num_warps=row_warps(block),
    )  # fmt: skip
    return total.view(x.shape), normed.view(x.shape)
