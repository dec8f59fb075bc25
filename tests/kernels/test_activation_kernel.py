"""SiLU-and-multiply kernel vs the torch reference, on odd sizes (several column blocks)."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DTYPES, assert_close

from evokernel.ops import activation, reference


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,inter", [(1, 1000), (5, 3072), (3, 7), (2, 2500)])
def test_silu_mul_matches_reference(rows: int, inter: int, dtype: torch.dtype, device) -> None:
    g = torch.Generator().manual_seed(rows + inter)
    gate_up = (torch.randn(rows, 2 * inter, generator=g) * 3).to(device, dtype)
    out = activation.silu_mul(gate_up)
    assert_close(out, reference.silu_mul(gate_up), "silu_mul")
