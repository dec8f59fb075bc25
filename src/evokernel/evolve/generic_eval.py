"""One evaluation of a generic (OpenEvolve-style) program: the user's evaluator, as a cascade.

    result = evaluate_generic(spec, code)      # an EvalResult; never raises for the program

`spec` (`GenericEval`) names the evaluator file, the stage functions it defines and the
cascade settings. Each call of a user function runs in its own `run_isolated` process (the
evaluator's sandbox, wall-clock limit `timeout_s` per call, memory limit, a private scratch
directory; the program under test is a file in a private temporary directory) through
`stages.run_stage`, which turns numpy scalars into numbers and an `EvaluationResult` (OpenEvolve's
or any object with `metrics` and `artifacts`) into plain metrics and artifacts.

The cascade follows OpenEvolve's: when `cascade` is on and the evaluator defines
`evaluate_stage1`, stage 1 runs first; a program whose stage score is below
`thresholds[i]` stops after stage i+1 and is stored with the result it has so far; a later
stage's metrics and artifacts are merged over the earlier ones (numeric metrics only, as
OpenEvolve does); an exception or timeout in stage 2 or 3 keeps the earlier stages' result and
records the failure (`stageN_passed: 0`, artifact `failure_stage`). Without stage functions,
or with the cascade off, `evaluate(path)` is called once.

Fitness (`score_of`): `combined_score` when the metrics hold it, else the mean of the numeric
metrics (booleans, the key `error`, the MAP-Elites feature metrics and non-finite values left
out), as OpenEvolve computes it; `fitness_source` says which. A program whose stage 1 (or only
stage) raises, times out, returns something that is not a dict or `EvaluationResult`, or has no
finite score is a failure (`correct=False`) with one reason line.

What is stored per program (`EvalResult.artifacts`): `metrics` (JSON of the final metrics),
`fitness_from`, `cascade` (the stages run and why it stopped), every evaluator artifact as
`artifact:<name>`, and the last call's `stdout`, `stderr` and `traceback` tails.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokernel.evaluate.result import EvalResult
from evokernel.reasons import reason

STAGE_FUNCTIONS = ("evaluate_stage1", "evaluate_stage2", "evaluate_stage3")
LABEL = "generic evaluator"
ARTIFACT = "artifact:"  # prefix of the evaluator's own artifacts in EvalResult.artifacts
STAGES_FILE = Path(__file__).with_name("stages.py")


@dataclass(frozen=True)
class GenericEval:
    name: str  # the problem's name ("generic:<stem>")
    evaluator: str  # absolute path of the evaluator file
    functions: tuple[str, ...]  # which of evaluate, evaluate_stage1..3 it defines
    timeout_s: float
    memory_mb: int
    cascade: bool = True  # run the stage functions when there are any
    thresholds: tuple[float, ...] = (0.5, 0.75, 0.9)
    features: tuple[str, ...] = ()  # metric names used as MAP-Elites features (not in the mean)


@dataclass
class _Call:
    ok: bool
    metrics: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)
    form: str = ""
    error: str = ""  # a reason line when not ok
    logs: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def score_of(metrics: dict[str, Any], features: tuple[str, ...] = ()) -> tuple[float | None, str]:
    """(fitness, where it came from): `combined_score`, else the mean of numeric metrics."""
    if "combined_score" in metrics:
        return _number(metrics["combined_score"]), "combined_score"
    numeric = {
        k: n
        for k, v in metrics.items()
        if k != "error" and k not in features and (n := _number(v)) is not None
    }
    if not numeric and features:
        numeric = {k: n for k in features if (n := _number(metrics.get(k))) is not None}
    if not numeric:
        return None, "no numeric metric"
    names = ", ".join(sorted(numeric))
    return sum(numeric.values()) / len(numeric), f"mean of {len(numeric)} metrics ({names})"


def _call(spec: GenericEval, function: str, program: Path) -> _Call:
    from evokernel.evaluate.isolated import run_isolated

    folder = Path(spec.evaluator).parent
    out = run_isolated(
        STAGES_FILE,
        "run_stage",
        [spec.evaluator, function, str(program)],
        timeout_s=spec.timeout_s,
        memory_mb=spec.memory_mb,
        cwd=folder,
        read_paths=[folder],
    )
    logs = {"stdout": out.stdout_tail, "stderr": out.stderr_tail}
    if out.traceback:
        logs["traceback"] = out.traceback
    if not out.ok:
        return _Call(False, error=out.reason or "crashed: no reason", logs=logs, wall_s=out.wall_s)
    value = out.value if isinstance(out.value, dict) else {}
    if value.get("form") not in ("dict", "EvaluationResult"):
        what = value.get("type", type(out.value).__name__)
        line = reason("no-result", f"{function}() returned {what}, not a dict or EvaluationResult")
        return _Call(False, error=line, logs=logs, wall_s=out.wall_s)
    metrics = value.get("metrics") or {}
    artifacts = {str(k): str(v) for k, v in (value.get("artifacts") or {}).items()}
    return _Call(True, metrics, artifacts, value["form"], logs=logs, wall_s=out.wall_s)


def _merge(into: _Call, later: _Call) -> None:
    """OpenEvolve's merge of a later stage: numeric metrics (not `error`) and artifacts."""
    into.metrics = {
        k: float(v)
        for source in (into.metrics, later.metrics)
        for k, v in source.items()
        if k != "error" and _number(v) is not None
    }
    into.artifacts.update(later.artifacts)
    into.logs = later.logs
    into.wall_s += later.wall_s


def _passes(metrics: dict[str, Any], threshold: float) -> bool:
    """OpenEvolve's threshold test: combined_score, else the mean of numeric metrics."""
    if _number(metrics.get("combined_score")) is not None:
        return float(metrics["combined_score"]) >= threshold
    values = [n for k, v in metrics.items() if k != "error" and (n := _number(v)) is not None]
    return bool(values) and sum(values) / len(values) >= threshold


def _run(spec: GenericEval, program: Path) -> tuple[_Call, list[str], str]:
    """(final call, the stage functions run, the failure line of stage 1 or "")."""
    stages = [f for f in STAGE_FUNCTIONS if f in spec.functions]
    if not (spec.cascade and "evaluate_stage1" in stages):
        first = _call(spec, "evaluate", program)
        return first, ["evaluate"], first.error
    result = _call(spec, "evaluate_stage1", program)
    ran = ["evaluate_stage1"]
    if not result.ok:
        return result, ran, result.error
    for i, function in enumerate(STAGE_FUNCTIONS[1:], 1):
        score, _ = score_of(result.metrics, spec.features)
        if i - 1 >= len(spec.thresholds) or function not in stages:
            break
        if not _passes(result.metrics, spec.thresholds[i - 1]):
            shown = "no score" if score is None else f"{score:.6g}"
            result.artifacts.setdefault(
                "cascade_stop",
                f"stage {i} score {shown} below threshold {spec.thresholds[i - 1]:g}",
            )
            break
        later = _call(spec, function, program)
        ran.append(function)
        if not later.ok:
            # OpenEvolve keeps the earlier stages' result when a later stage fails.
            result.metrics[f"stage{i + 1}_passed"] = 0.0
            result.artifacts["failure_stage"] = f"stage{i + 1}"
            result.artifacts[f"stage{i + 1}_error"] = later.error
            result.logs = later.logs
            break
        _merge(result, later)
    return result, ran, ""


def _result(spec: GenericEval, call: _Call, correct: bool, lines: list[str]) -> EvalResult:
    artifacts = {k: v for k, v in call.logs.items() if v}
    artifacts.update({ARTIFACT + k: v for k, v in call.artifacts.items()})
    return EvalResult(
        task=spec.name,
        candidate="program",
        correct=correct,
        reasons=lines,
        stage="done" if correct else "load",
        device=None,
        timing_label=LABEL,
        artifacts=artifacts,
        wall_s=call.wall_s,
    )


def evaluate_generic(spec: GenericEval, code: str) -> EvalResult:
    """Evaluate `code` with the user's evaluator (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="evokernel-generic-") as tmp:
        program = Path(tmp) / "program.py"
        program.write_text(code, encoding="utf-8")
        call, ran, failure = _run(spec, program)
    if failure:
        result = _result(spec, call, False, [failure])
        result.artifacts["cascade"] = f"failed in {ran[-1]}()"
        return result
    score, source = score_of(call.metrics, spec.features)
    result = _result(spec, call, score is not None, [])
    result.artifacts["metrics"] = json.dumps(call.metrics, sort_keys=True)
    result.artifacts["fitness_from"] = source
    result.artifacts["cascade"] = " -> ".join(f"{f}()" for f in ran)
    if score is None:
        if source == "combined_score":
            shown = repr(call.metrics.get("combined_score"))
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            detail = f"{ran[-1]}() gave no finite combined_score ({shown})"
        else:
            detail = f"{ran[-1]}() gave no finite combined_score and no numeric metric"
        result.reasons.append(reason("no-result", detail))
        result.stage = "load"
    return result


def fitness_of(result: EvalResult, features: tuple[str, ...] = ()) -> float | None:
    """The fitness stored in a generic result (None when it failed)."""
    if not result.correct or "metrics" not in result.artifacts:
        return None
    try:
        metrics = json.loads(result.artifacts["metrics"])
    except ValueError:
        return None
    return score_of(metrics, features)[0] if isinstance(metrics, dict) else None


def metrics_of(result: EvalResult | None) -> dict[str, Any]:
    if result is None or "metrics" not in result.artifacts:
        return {}
    try:
        metrics = json.loads(result.artifacts["metrics"])
    except ValueError:
        return {}
    return metrics if isinstance(metrics, dict) else {}
