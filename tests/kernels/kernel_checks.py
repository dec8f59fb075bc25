"""Comparison helper for kernel tests: max and mean error in the failure message."""

from __future__ import annotations

import pytest
import torch

# Per output dtype (atol, rtol): our kernels and the references round at the same points, so
# they differ only by float32 summation order and an occasional 1-ulp rounding flip.
# bfloat16 runs on the GPU only (the interpreter computes it as NaN).
TOLERANCE = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}
DTYPES = (torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.gpu))


def assert_close(
    out: torch.Tensor, ref: torch.Tensor, what: str, rounded: torch.dtype | None = None
) -> None:
    """`rounded`: the dtype the values were rounded to (logits are float32 holding values of
    the model dtype: a 1-ulp flip there is that dtype's ulp)."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert out.dtype == ref.dtype, f"{what}: dtype {out.dtype} != {ref.dtype}"
    atol, rtol = TOLERANCE[rounded or ref.dtype]
    err = (out.double() - ref.double()).abs()
    bound = atol + rtol * ref.double().abs()
    assert bool((err <= bound).all()), (
        f"{what}: max err {err.max().item():.3e}, mean err {err.mean().item():.3e}, "
        f"{int((err > bound).sum())} of {err.numel()} outside atol={atol} rtol={rtol}"
    )
