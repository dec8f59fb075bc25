"""Generic (OpenEvolve-style) problems: a program with an EVOLVE-BLOCK and a user evaluator.

    evokernel evolve --program P.py --evaluator E.py

`E.py` defines `evaluate(path) -> dict`; the dict must hold a finite number `combined_score`
(higher is better), which is the fitness. Any other keys are kept as metrics (in the result's
`artifacts["metrics"]`). Every call runs through `evokernel.evaluate.run_isolated`: a fresh
spawned process in its own session, with `evaluator.timeout_s` and `evaluator.memory_mb`; the
program under test is written to a private temporary file whose path is the argument.

Failures are results, never crashes of the search: an exception in `evaluate`, a timeout, a
crash, a value that is not a dict, or a dict without a finite numeric `combined_score` each
yield `correct=False` with one reason line.

The evaluator runs from its own path (so helper modules beside it import as usual); the run
stores that absolute path and the file's sha256, and a resume refuses an evaluator that is
gone or has changed. A remote worker (the `ray` backend) runs it from the same path: the job
carries the path and the sha256, and a worker whose file is missing or different refuses the
job (`JobError`), which stops the run with that line.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from evokernel import pysource
from evokernel.errors import ConfigError
from evokernel.evaluate.result import EvalResult, reason
from evokernel.evolve.config import SearchConfig
from evokernel.evolve.fitness import GENERIC_LABEL
from evokernel.evolve.jobs import EvalJob, JobError, run_job
from evokernel.evolve.problem import read_program, read_user_file

LABEL = "generic evaluator (combined_score)"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _score(value: Any) -> float | None:
    """`combined_score` as a finite float, or None (missing, not a number, NaN, inf, or too
    large for a float)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        score = float(value)
    except OverflowError:
        return None
    return score if math.isfinite(score) else None


def _failed(name: str, line: str, artifacts: dict[str, str], wall: float) -> EvalResult:
    return EvalResult(
        task=name,
        candidate="program",
        correct=False,
        reasons=[line],
        stage="load",
        device=None,
        timing_label=LABEL,
        artifacts=artifacts,
        wall_s=wall,
    )


class GenericProblem:
    def __init__(self, seed_code: str, evaluator: Path, device: str, cfg: SearchConfig, name: str):
        self.fitness_label = GENERIC_LABEL
        self.fitness_kind = "score"
        self.interface = ""
        self.regimes: list[str] = []
        self.scenarios: list[tuple[str, str]] = []
        self.timed = False
        self.screens = False
        self.seed_code = seed_code
        self.evaluator = evaluator
        self.evaluator_sha256 = _sha(evaluator)
        self.device = device
        self.cfg = cfg
        self.name = name
        try:
            doc = ast.get_docstring(pysource.parse(seed_code)) or ""
        except SyntaxError:
            doc = ""
        self.description = doc

    @classmethod
    def from_files(
        cls, program: Path, evaluator: Path, device: str, cfg: SearchConfig
    ) -> GenericProblem:
        code = read_program(program)
        try:
            tree = pysource.parse(read_user_file("--evaluator", evaluator))
        except SyntaxError as err:
            raise ConfigError(f"--evaluator {evaluator}: not valid Python ({err.msg})") from None
        if not any(isinstance(n, ast.FunctionDef) and n.name == "evaluate" for n in tree.body):
            raise ConfigError(f"--evaluator {evaluator}: defines no evaluate(path) function")
        return cls(code, evaluator.resolve(), device, cfg, f"generic:{program.stem}")

    @classmethod
    def from_spec(
        cls, spec: dict[str, Any], device: str, cfg: SearchConfig, seed_code: str
    ) -> GenericProblem:
        evaluator = Path(spec["evaluator"])
        if not evaluator.is_file():
            raise ConfigError(f"the run's evaluator {evaluator} is gone; it cannot resume")
        if _sha(evaluator) != spec["evaluator_sha256"]:
            raise ConfigError(f"the run's evaluator {evaluator} changed since the run started")
        return cls(seed_code, evaluator, device, cfg, spec["name"])

    def spec(self) -> dict[str, Any]:
        return {
            "kind": "generic",
            "name": self.name,
            "evaluator": str(self.evaluator),
            "evaluator_sha256": self.evaluator_sha256,
        }

    def job(self, code: str, promote_above: float | None = None) -> EvalJob:
        ev = self.cfg.evaluator
        return EvalJob(
            kind="generic",
            name=self.name,
            device=self.device,
            code=code,
            timeout_s=ev.timeout_s,
            memory_mb=ev.memory_mb,
            time=False,
            evaluator=str(self.evaluator),
            evaluator_sha256=self.evaluator_sha256,
        )

    def evaluate(
        self, code: str, *, gpu: int = 0, promote_above: float | None = None
    ) -> EvalResult:
        return run_job(self.job(code), gpu)

    def fitness(self, result: EvalResult) -> float | None:
        if not result.correct or "metrics" not in result.artifacts:
            return None
        return _score(json.loads(result.artifacts["metrics"]).get("combined_score"))

    def regime_speedups(self, result: EvalResult) -> dict[str, float]:
        return {}

    def hardware(self, result: EvalResult | None) -> dict[str, Any]:
        return {"device": self.device}


def evaluate_program(job: EvalJob) -> EvalResult:
    """Run a generic job: the user's `evaluate(path)` on the program, in `run_isolated`."""
    from evokernel.evaluate import run_isolated

    evaluator = Path(job.evaluator)
    if not evaluator.is_file():
        raise JobError(f"the evaluator {evaluator} does not exist on this worker")
    if _sha(evaluator) != job.evaluator_sha256:
        raise JobError(f"the evaluator {evaluator} on this worker differs from the run's")
    with tempfile.TemporaryDirectory(prefix="evokernel-generic-") as tmp:
        program = Path(tmp) / "program.py"
        program.write_text(job.code, encoding="utf-8")
        out = run_isolated(
            evaluator,
            "evaluate",
            [str(program)],
            timeout_s=job.timeout_s,
            memory_mb=job.memory_mb,
            cwd=evaluator.parent,
        )
    artifacts = {"stderr": out.stderr_tail, "stdout": out.stdout_tail}
    if out.traceback:
        artifacts["traceback"] = out.traceback
    if not out.ok:
        return _failed(job.name, out.reason or "crashed: no reason", artifacts, out.wall_s)
    value = out.value
    if not isinstance(value, dict):
        line = reason("no-result", f"evaluate() returned {type(value).__name__}, not a dict")
        return _failed(job.name, line, artifacts, out.wall_s)
    score = value.get("combined_score")
    if _score(score) is None:
        shown = repr(score) if len(repr(score)) <= 40 else repr(score)[:37] + "..."
        line = reason("no-result", f"evaluate() gave no finite combined_score ({shown})")
        return _failed(job.name, line, artifacts, out.wall_s)
    artifacts["metrics"] = json.dumps(value, sort_keys=True, default=str)
    return EvalResult(
        task=job.name,
        candidate="program",
        correct=True,
        reasons=[],
        stage="done",
        device=None,
        timing_label=LABEL,
        artifacts=artifacts,
        wall_s=out.wall_s,
    )
