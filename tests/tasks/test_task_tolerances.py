"""Tolerance arithmetic: both bounds must hold; the float32 bound rejects float16 rounding,
the 16-bit bounds accept their own rounding of the output."""

from __future__ import annotations

import pytest
import torch
from task_checks import attention_in, errors, linear_in, passes

from evokernel.tasks import TASK_NAMES, get_task
from evokernel.tasks.base import Tolerance


def test_errors_follow_the_documented_formula():
    ref = torch.tensor([3.0, -4.0], dtype=torch.float64)  # norm 5, max|ref| 4
    out = torch.tensor([3.0, -3.0])
    rel_l2, max_abs_rel = errors(out, ref)
    assert rel_l2 == pytest.approx(1 / 5) and max_abs_rel == pytest.approx(1 / 4)
    assert passes(out, ref, Tolerance(rel_l2=0.2, max_abs_rel=0.25))
    assert not passes(out, ref, Tolerance(rel_l2=0.19, max_abs_rel=1.0))  # either bound fails
    assert not passes(out, ref, Tolerance(rel_l2=1.0, max_abs_rel=0.24))
    assert not passes(torch.tensor([3.0, float("nan")]), ref, Tolerance(1.0, 1.0))


@pytest.mark.parametrize("name", TASK_NAMES)
def test_tolerances_order_the_dtypes(name):
    task = get_task(name)
    f32, f16, bf16 = (task.tolerance(d) for d in (torch.float32, torch.float16, torch.bfloat16))
    for tol in (f32, f16, bf16):
        assert 0 < tol.rel_l2 <= tol.max_abs_rel
    assert f32.rel_l2 < f16.rel_l2 < bf16.rel_l2
    # float16 rounding of a float32 result alone (u = 2^-11, ~2.8e-4 rms) exceeds float32's bound
    assert f32.rel_l2 < 2**-11 / 10
    # a result rounded to the dtype (error <= u) passes with room to spare
    assert f16.rel_l2 >= 2 * 2**-11 and bf16.rel_l2 >= 2 * 2**-8


@pytest.mark.parametrize("name", TASK_NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rounding_the_reference_to_the_dtype_passes(name, dtype):
    task = get_task(name)
    for s in task.scenarios("cpu"):
        ref = task.reference(task.make_inputs(s, 0, dtype))
        assert passes(ref.to(dtype), ref, task.tolerance(dtype)), s.name
        if dtype == torch.float32:
            assert not passes(ref.to(torch.float16).float(), ref, task.tolerance(dtype))


@pytest.mark.parametrize(
    ("name", "compute_in"),
    [("gqa_decode_attention", attention_in), ("decode_linear", linear_in)],
)
def test_lower_precision_fails_and_the_dtype_itself_passes(name, compute_in):
    task = get_task(name)
    lower = {torch.float32: torch.float16, torch.float16: torch.bfloat16}
    lower[torch.bfloat16] = torch.float8_e4m3fn
    for dtype, low in lower.items():
        for s in task.scenarios("cpu"):
            inputs = task.make_inputs(s, 0, dtype)
            ref = task.reference(inputs)
            tol = task.tolerance(dtype)
            assert passes(compute_in(inputs, dtype), ref, tol), (s.name, dtype)
            assert not passes(compute_in(inputs, low), ref, tol), (s.name, dtype, low)
            assert errors(compute_in(inputs, dtype), ref)[0] < tol.rel_l2 / 2
