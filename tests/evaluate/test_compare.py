"""The comparator: the order of its judgements and what its reason lines say."""

from __future__ import annotations

import torch

from evokernel.evaluate.compare import Case, errors, judge, judge_repeat
from evokernel.evaluate.protocol import CallRecord
from evokernel.reasons import reason_code
from evokernel.tasks.base import OutputSpec, Tolerance

TOL = Tolerance(rel_l2=1e-5, max_abs_rel=1e-5)
REF = torch.linspace(-1, 1, 24, dtype=torch.float64).reshape(2, 3, 4)
SPEC = OutputSpec((2, 3, 4), torch.float32)
CASE = Case("b1", "b1", False, torch.float32, "input set 1")


def record(out: torch.Tensor, type: str = "torch.Tensor", device: str = "cpu") -> CallRecord:
    return CallRecord(step="same", mutated=[], type=type, device=device, out=out)


def verdict(out: torch.Tensor, **fields: str) -> str | None:
    _check, line = judge(record(out, **fields), CASE, SPEC, REF, TOL, "cpu")
    return reason_code(line) if line else None


def test_order_of_judgements() -> None:
    good = REF.float()
    assert verdict(good) is None
    assert verdict(good, type="mypkg.Sneaky") == "output-type"
    assert verdict(good, device="cuda") == "output-device"
    assert verdict(good[:, :, :3]) == "output-shape"
    assert verdict(good.double()) == "output-dtype"
    nan = good.clone()
    nan[0, 0, 0] = float("nan")
    assert verdict(nan) == "not-finite"
    assert verdict(good * 1.001) == "mismatch"
    assert verdict(good.half().float()) == "mismatch"  # float16 rounding fails float32


def test_timed_mismatch_and_detail() -> None:
    check, line = judge(record(REF.float() + 0.5), CASE, SPEC, REF, TOL, "cpu", timed=True)
    assert line is not None and reason_code(line) == "timed-output-mismatch"
    assert "rel_l2" in line and "worst at [" in line and not check.passed
    assert check.rel_l2 == errors(REF.float() + 0.5, REF)[0]


def test_repeat_tolerates_last_bit_noise_only() -> None:
    out = REF.float()
    assert judge_repeat(out, out.clone(), CASE, TOL) is None
    assert judge_repeat(out, out * (1 + 1e-7), CASE, TOL) is None
    line = judge_repeat(out, out + 0.1, CASE, TOL)
    assert line is not None and reason_code(line) == "nondeterministic"
