"""RMSNorm and fused residual-add + RMSNorm kernels vs the torch references, on odd sizes."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DTYPES, assert_close

from evokernel.ops import norm, reference

SHAPES = [(1, 1000), (7, 64), (5, 1024), (3, 33)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", SHAPES)
def test_rms_norm_matches_reference(rows: int, hidden: int, dtype: torch.dtype, device) -> None:
    g = torch.Generator().manual_seed(rows * 7919 + hidden)
    x = (torch.randn(rows, hidden, generator=g) * 3).to(device, dtype)
    w = (1 + 0.2 * torch.randn(hidden, generator=g)).to(device, dtype)
    assert_close(norm.rms_norm(x, w, 1e-6), reference.rms_norm(x, w, 1e-6), "rms_norm")


def test_rms_norm_keeps_leading_dims(device: str) -> None:
    x = torch.randn(2, 3, 40, device=device)
    w = torch.rand(40, device=device)
    out = norm.rms_norm(x, w, 1e-6)
    assert out.shape == (2, 3, 40)
    assert_close(out, reference.rms_norm(x, w, 1e-6), "rms_norm 3-D")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", SHAPES)
def test_residual_add_matches_reference(rows: int, hidden: int, dtype: torch.dtype, device) -> None:
    g = torch.Generator().manual_seed(rows * 31 + hidden)
    x = torch.randn(rows, hidden, generator=g).to(device, dtype)
    res = (torch.randn(rows, hidden, generator=g) * 4).to(device, dtype)
    w = (1 + 0.2 * torch.randn(hidden, generator=g)).to(device, dtype)
    total, normed = norm.residual_add(x, res, w, 1e-6)
    ref_total, ref_normed = reference.residual_add(x, res, w, 1e-6)
    assert_close(total, ref_total, "residual_add sum")
    assert_close(normed, ref_normed, "residual_add norm")
