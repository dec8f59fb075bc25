"""The comparator, in the parent only: judges one output the worker sent against the task's
float64 reference, and two outputs of the same inputs against each other.

Order of judgement for an output (the first failure wins): exact type `torch.Tensor`, device,
shape, dtype, all finite, then the task tolerance on

    rel_l2      = ||out - ref||_2 / ||ref||_2
    max_abs_rel = max|out - ref| / max|ref|

(both in float64; a zero reference uses 1 as its norm). Hidden scenarios appear in reason lines
only as "hidden scenario N" (their shapes are drawn from the secret seed and must not reach a
prompt); the full name stays in the CheckRecord for people.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evokernel.evaluate.protocol import CallRecord
from evokernel.evaluate.result import CheckRecord
from evokernel.reasons import reason
from evokernel.tasks.base import OutputSpec, Tolerance


@dataclass(frozen=True)
class Case:
    """Which call an output came from: scenario, input set and dtype."""

    scenario: str
    label: str  # what reason lines may show: the public name or "hidden scenario N"
    hidden: bool
    dtype: torch.dtype
    note: str = ""  # e.g. "input set 2", "after perturb", "timed call 17"

    def where(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{self.label} {dtype}" + (f" ({self.note})" if self.note else "")


def errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(rel_l2, max_abs_rel) of `out` against `ref`, in float64."""
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    diff = o - r
    ref_norm = float(torch.linalg.vector_norm(r)) or 1.0
    ref_max = float(r.abs().max()) if r.numel() else 0.0
    rel_l2 = float(torch.linalg.vector_norm(diff)) / ref_norm
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    return rel_l2, max_abs / (ref_max or 1.0)


def _worst(out: torch.Tensor, ref: torch.Tensor) -> str:
    diff = (out.to(torch.float64) - ref.to(torch.float64)).abs()
    if diff.numel() == 0:
        return ""
    flat = int(diff.reshape(-1).argmax())
    index, rest = [], flat
    for size in reversed(diff.shape):
        rest, i = divmod(rest, size)
        index.append(i)
    index.reverse()
    got = float(out.reshape(-1)[flat])
    want = float(ref.reshape(-1)[flat])
    return f"; worst at {index}: got {got:.6g}, expected {want:.6g}"


def judge(
    record: CallRecord,
    case: Case,
    spec: OutputSpec,
    ref: torch.Tensor,
    tol: Tolerance,
    device: str,
    timed: bool = False,
) -> tuple[CheckRecord, str | None]:
    """(the CheckRecord, a reason line or None) for one output record from the worker."""
    dtype = str(case.dtype).removeprefix("torch.")

    def fail(code: str, detail: str, l2: float | None = None, mx: float | None = None):
        line = reason(code, f"{case.where()}: {detail}")
        rec = CheckRecord(case.scenario, case.hidden, dtype, l2, mx, False, line)
        return rec, line

    if record.reason is not None:
        line = record.reason
        return CheckRecord(case.scenario, case.hidden, dtype, None, None, False, line), line
    if record.type != "torch.Tensor" or record.out is None:
        return fail("output-type", f"returned {str(record.type)[:80]}, not a torch.Tensor")
    out = record.out
    if record.device != device:
        return fail("output-device", f"output on {record.device!r}, expected {device!r}")
    if tuple(out.shape) != tuple(spec.shape):
        return fail("output-shape", f"shape {list(out.shape)}, expected {list(spec.shape)}")
    if out.dtype != spec.dtype:
        return fail("output-dtype", f"dtype {out.dtype}, expected {spec.dtype}")
    finite = torch.isfinite(out)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        return fail("not-finite", f"{bad} of {out.numel()} values are NaN or Inf")
    rel_l2, max_abs_rel = errors(out, ref)
    if rel_l2 > tol.rel_l2 or max_abs_rel > tol.max_abs_rel:
        code = "timed-output-mismatch" if timed else "mismatch"
        detail = (
            f"rel_l2 {rel_l2:.3g} (tolerance {tol.rel_l2:g}), max_abs_rel {max_abs_rel:.3g} "
            f"(tolerance {tol.max_abs_rel:g}){_worst(out, ref)}"
        )
        return fail(code, detail, rel_l2, max_abs_rel)
    return CheckRecord(
        case.scenario, case.hidden, dtype, rel_l2, max_abs_rel, True, case.note
    ), None


def judge_repeat(
    first: torch.Tensor, second: torch.Tensor, case: Case, tol: Tolerance
) -> str | None:
    """Two calls on the same inputs must agree within the tolerance (bitwise is not required:
    split reductions with atomics legitimately differ in the last bits)."""
    if first.shape != second.shape or first.dtype != second.dtype:
        return reason("nondeterministic", f"{case.where()}: two calls returned different shapes")
    if not bool(torch.isfinite(second).all()):
        return reason("nondeterministic", f"{case.where()}: the second call returned NaN or Inf")
    rel_l2, max_abs_rel = errors(second, first)
    if rel_l2 > tol.rel_l2 or max_abs_rel > tol.max_abs_rel:
        return reason(
            "nondeterministic",
            f"{case.where()}: two calls on the same inputs differ by rel_l2 {rel_l2:.3g}, "
            f"max_abs_rel {max_abs_rel:.3g}",
        )
    return None
