"""Comparison helpers for kernel tests (max and mean error in the failure message), and the
CUDA rows kernel's normed references."""

from __future__ import annotations

import functools

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


# The normed ops as the CUDA rows kernel rounds them (kernels/cuda/rows_mma.cu): the products
# take round(x * norm_w), and each row's rstd scales the float32 sums, so the norm's two
# roundings (transformers': round(round(x * rstd) * w)) become one. Same points as the
# kernel's, so the usual tolerance.
def late_sums(x, norm_w, w, eps):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return rstd * ((xf * norm_w.float()).to(x.dtype).float() @ w.float().T)


def late_norm_linear(x, norm_w, w, eps, bias=None):
    acc = late_sums(x, norm_w, w, eps)
    return (acc if bias is None else acc + bias.float()).to(x.dtype)


def late_gate_up(x, norm_w, gate_up, eps):
    gate, up = late_sums(x, norm_w, gate_up, eps).to(x.dtype).chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


def late_logits(x, norm_w, w, eps):
    return late_sums(x, norm_w, w, eps).to(x.dtype).float()


def _ulp(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.finfo(dtype).eps * torch.exp2(torch.floor(torch.log2(v.abs().clamp_min(1e-30))))


def assert_act_close(act, x, norm_w, gate_up, eps, what):
    """act = round(round(silu(gate)) * up) against the late reference, allowing on top of the
    usual tolerance a flip of one ulp in gate, in up or in their roundings (the float32 sums'
    order decides a rounding of gate or up, which the product carries at the other factor's
    scale; silu's slope is at most 1.1)."""
    gate, up = late_sums(x, norm_w, gate_up, eps).to(x.dtype).chunk(2, dim=-1)
    silu = torch.nn.functional.silu(gate)
    want = silu * up
    atol, rtol = TOLERANCE[x.dtype]
    g, u, s = gate.double(), up.double(), silu.double()
    ulp = functools.partial(_ulp, dtype=x.dtype)
    flip = s.abs() * ulp(u) + u.abs() * (1.1 * ulp(g) + ulp(s)) + ulp(want.double())
    err = (act.double() - want.double()).abs()
    bound = atol + rtol * want.double().abs() + flip
    assert bool((err <= bound).all()), f"{what}: max err {err.max().item():.3e}"
