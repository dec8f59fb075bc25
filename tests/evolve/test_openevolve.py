"""OpenEvolve-style tasks: its evaluator API (EvaluationResult with artifacts, metrics without a
combined_score, numpy scalars, a stage cascade), programs with no or several EVOLVE-BLOCKs, and
OpenEvolve's published example `function_minimization` run unchanged through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evokernel.evolve.config import config_from_dict
from evokernel.evolve.generic import MEAN_LABEL, GenericProblem

EXAMPLE = Path(__file__).parent / "openevolve" / "function_minimization"

PROGRAM = '''"""Toy: the score is -(X - 3)^2."""
# EVOLVE-BLOCK-START
X = 1.0
# EVOLVE-BLOCK-END


def value():
    return -((X - 3.0) ** 2)
'''

RESULT_EVALUATOR = """import importlib.util

import numpy as np
from openevolve.evaluation_result import EvaluationResult


def _load(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluate(path):
    m = _load(path)
    score = np.float32(m.value())
    return EvaluationResult(
        metrics={"combined_score": score, "calls": np.int64(3), "ok": np.bool_(True)},
        artifacts={"hint": f"X is {m.X}", "raw": b"bytes \\xff"},
    )
"""

METRICS_EVALUATOR = """import importlib.util


def evaluate(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return {"closeness": m.value(), "constant": 1, "note": "text", "error": 5.0}
"""

CASCADE_EVALUATOR = """import importlib.util


def _x(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m.X


def evaluate_stage1(path):
    return {"combined_score": 1.0 if _x(path) > 2 else 0.1, "stage1": 1.0}


def evaluate_stage2(path):
    return {"combined_score": 10.0 + _x(path), "stage2": 1.0}


def evaluate(path):
    raise AssertionError("the cascade calls the stages, not evaluate()")
"""


def _problem(tmp_path: Path, source: str, program: str = PROGRAM, **cfg) -> GenericProblem:
    (tmp_path / "prog.py").write_text(program)
    (tmp_path / "ev.py").write_text(source)
    return GenericProblem.from_files(
        tmp_path / "prog.py", tmp_path / "ev.py", "cpu", config_from_dict(cfg)
    )


def test_an_evaluation_result_with_artifacts_and_numpy_scalars(tmp_path):
    problem = _problem(tmp_path, RESULT_EVALUATOR)
    result = problem.evaluate(PROGRAM)
    assert result.correct, result.reasons
    assert problem.fitness(result) == -4.0
    metrics = json.loads(result.artifacts["metrics"])
    assert metrics == {"calls": 3, "combined_score": -4.0, "ok": True}
    assert result.artifacts["artifact:hint"] == "X is 1.0"
    assert result.artifacts["artifact:raw"].startswith("bytes ")
    assert result.artifacts["fitness_from"] == "combined_score"


def test_metrics_without_a_combined_score_average_the_numeric_ones(tmp_path):
    problem = _problem(tmp_path, METRICS_EVALUATOR)
    result = problem.evaluate(PROGRAM)
    assert result.correct, result.reasons
    # closeness -4 and constant 1; the text, and the key `error`, are left out
    assert problem.fitness(result) == pytest.approx(-1.5)
    assert result.artifacts["fitness_from"] == "mean of 2 metrics (closeness, constant)"
    assert "no combined_score" in problem.label_for(result) or problem.label_for(result) == (
        MEAN_LABEL
    )


def test_a_two_stage_cascade_with_a_threshold(tmp_path):
    problem = _problem(tmp_path, CASCADE_EVALUATOR, evaluator={"cascade_thresholds": [0.5]})
    low = problem.evaluate(PROGRAM)  # X = 1: stage 1 scores 0.1 < 0.5, stored with stage 1
    assert low.correct and problem.fitness(low) == 0.1
    assert low.artifacts["cascade"] == "evaluate_stage1()"
    assert "below threshold 0.5" in low.artifacts["artifact:cascade_stop"]
    high = problem.evaluate(PROGRAM.replace("X = 1.0", "X = 2.5"))
    assert high.artifacts["cascade"] == "evaluate_stage1() -> evaluate_stage2()"
    assert problem.fitness(high) == 12.5
    assert json.loads(high.artifacts["metrics"]) == {
        "combined_score": 12.5,
        "stage1": 1.0,
        "stage2": 1.0,
    }
    off = _problem(tmp_path, CASCADE_EVALUATOR, evaluator={"cascade": False})
    failed = off.evaluate(PROGRAM)  # YAML's `off`: evaluate() only, which refuses here
    assert not failed.correct and "AssertionError" in failed.reasons[0]


def test_a_stage_that_fails_keeps_the_earlier_result(tmp_path):
    evaluator = CASCADE_EVALUATOR.replace(
        'return {"combined_score": 10.0', 'raise ValueError("stage 2 broke")\n    return {"x": 1'
    )
    problem = _problem(tmp_path, evaluator)
    result = problem.evaluate(PROGRAM.replace("X = 1.0", "X = 2.5"))
    assert result.correct and problem.fitness(result) == 1.0
    assert result.artifacts["artifact:failure_stage"] == "stage2"
    assert "stage 2 broke" in result.artifacts["artifact:stage2_error"]
    assert json.loads(result.artifacts["metrics"])["stage2_passed"] == 0.0


@pytest.mark.parametrize(
    ("returned", "needle"),
    [
        ("[1, 2]", "returned list, not a dict or EvaluationResult"),
        ("{'combined_score': float('nan')}", "no finite combined_score ('nan')"),
        ("{'note': 'no numbers'}", "no numeric metric"),
    ],
)
def test_results_that_carry_no_score_are_failures_with_a_reason(tmp_path, returned, needle):
    problem = _problem(tmp_path, f"def evaluate(path):\n    return {returned}\n")
    result = problem.evaluate(PROGRAM)
    assert not result.correct and needle in result.reasons[0]


def _evolve(*args: str, cwd: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "evokernel", "evolve", "--device", "cpu", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def _rows(run: Path) -> list:
    from evokernel.evolve.database import Database

    db = Database(run / "programs.sqlite", readonly=True)
    try:
        return list(db.programs)
    finally:
        db.close()


def test_programs_without_markers_and_with_two_blocks_evolve(tmp_path):
    whole = "A = 5\nB = 9\n\n\ndef value():\n    return -((A - 2) ** 2) - (B - 4) ** 2\n"
    two = (
        "# EVOLVE-BLOCK-START\nA = 5\n# EVOLVE-BLOCK-END\nFIXED = 1\n"
        "# EVOLVE-BLOCK-START\nB = 9\n# EVOLVE-BLOCK-END\n\n\n"
        "def value():\n    return -((A - 2) ** 2) - (B - 4) ** 2 + FIXED\n"
    )
    evaluator = (
        "import importlib.util\n\n\ndef evaluate(path):\n"
        "    spec = importlib.util.spec_from_file_location('c', path)\n"
        "    m = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(m)\n"
        "    return {'combined_score': m.value()}\n"
    )
    (tmp_path / "ev.py").write_text(evaluator)
    for name, program in (("whole", whole), ("two", two)):
        (tmp_path / f"{name}.py").write_text(program)
        out = _evolve(
            "--program", str(tmp_path / f"{name}.py"), "--evaluator", str(tmp_path / "ev.py"),
            "--out", str(tmp_path / name), "--iterations", "12", "--seed", "1", "--json",
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        summary = json.loads(out.stdout.strip().splitlines()[-1])
        rows = [p for p in _rows(tmp_path / name) if p.iteration >= 0 and p.code]
        assert rows and all(p.kind.startswith("offline:") for p in rows if not p.migrant)
        assert summary["best"]["fitness"] > -34.0  # better than the start, -(3^2) - 5^2
        if name == "two":
            for p in rows:  # the fixed line between the blocks never changes
                assert "# EVOLVE-BLOCK-END\nFIXED = 1\n# EVOLVE-BLOCK-START" in p.code


def test_openevolves_function_minimization_runs_unchanged(tmp_path):
    """The published example, files unchanged, with its own config.yaml; no LLM here."""
    for name in ("initial_program.py", "evaluator.py", "config.yaml"):
        assert (EXAMPLE / name).is_file()
    out = _evolve(
        "--program", "initial_program.py", "--evaluator", "evaluator.py",
        "--config", "config.yaml", "--offline", "--iterations", "16", "--seed", "2",
        "--out", str(tmp_path / "run"), "--json", cwd=EXAMPLE,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    warnings = [ln for ln in out.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "database.similarity_threshold" in warnings[0], out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["evaluated"] >= 10 and summary["failed"] == 0
    rows = _rows(tmp_path / "run")
    seed = next(p for p in rows if p.id == "seed")
    assert seed.fitness is not None and 0 < seed.fitness <= 1.5
    kinds = {p.kind for p in rows if p.iteration >= 0 and not p.migrant}
    assert kinds and all(k.startswith("offline:") for k in kinds)
    assert not list(tmp_path.glob("evokernel-*"))


def test_an_unreachable_llm_is_said_at_once_and_the_run_fails(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "ev.py").write_text(METRICS_EVALUATOR)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "llm:\n  api_base: http://127.0.0.1:9/v1\n  primary_model: m\n  retries: 0\n"
        "  timeout: 2\n  api_key: ${EVOKERNEL_TEST_NO_SUCH_KEY}\n"
    )
    args = ["--program", str(tmp_path / "prog.py"), "--evaluator", str(tmp_path / "ev.py")]
    args += ["--config", str(cfg), "--iterations", "40"]
    strict = _evolve(*args, "--strict", "--out", str(tmp_path / "strict"))
    assert strict.returncode == 2 and strict.stderr.count("\n") == 1, strict.stderr
    assert "EVOKERNEL_TEST_NO_SUCH_KEY is not set" in strict.stderr
    assert not (tmp_path / "strict").exists()
    out = _evolve(*args, "--out", str(tmp_path / "run"))
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert any("127.0.0.1:9/v1 cannot be reached" in ln for ln in lines if ln.startswith("warning"))
    assert lines[-1].startswith("error: no child program could be proposed")
    assert "Traceback" not in out.stderr
    done = [p for p in _rows(tmp_path / "run") if p.iteration >= 0]
    assert 8 <= len(done) < 20  # it gave up early instead of running all 40 iterations
    state = subprocess.run(
        [sys.executable, "-m", "evokernel", "status", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "stopped: no child program could be proposed" in state.stdout
