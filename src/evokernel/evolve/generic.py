"""Generic (OpenEvolve-style) problems: any Python program and the user's evaluator.

    evokernel evolve --program P.py --evaluator E.py [--config openevolve.yaml]

`P.py` may hold one or several EVOLVE-BLOCKs (each evolvable) or none (the whole file evolves).
`E.py` defines `evaluate(path)` and optionally `evaluate_stage1/2/3(path)`, returning a dict of
metrics or an `EvaluationResult` (metrics + artifacts; OpenEvolve's class, or a stand-in when
`openevolve` is not installed). How an evaluation runs, what the fitness is (`combined_score`,
else the mean of the numeric metrics) and what is stored: `generic_eval.py`.

The evaluator runs from its own path (helper modules beside it import as usual); the run stores
that absolute path and the file's sha256, and a resume refuses an evaluator that is gone or has
changed. A remote worker (the `ray` backend) runs it from the same path: the job carries the
path and the sha256, and a worker whose file is missing or different refuses the job
(`JobError`), which stops the run with that line.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path
from typing import Any

from evokernel import pysource
from evokernel.errors import ConfigError
from evokernel.evaluate.result import EvalResult
from evokernel.evolve.config import SearchConfig
from evokernel.evolve.generic_eval import STAGE_FUNCTIONS, fitness_of, metrics_of, score_of
from evokernel.evolve.jobs import EvalJob, run_job
from evokernel.evolve.problem import read_program, read_user_file

COMBINED_LABEL = "combined_score from the user's evaluator"
MEAN_LABEL = "mean of the evaluator's numeric metrics (it reports no combined_score)"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def evaluator_functions(path: Path, source: str) -> tuple[str, ...]:
    """Which of evaluate, evaluate_stage1..3 the evaluator file defines at module level."""
    try:
        tree = pysource.parse(source)
    except SyntaxError as err:
        raise ConfigError(f"--evaluator {path}: not valid Python ({err.msg})") from None
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names |= {
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    return tuple(f for f in ("evaluate", *STAGE_FUNCTIONS) if f in names)


class GenericProblem:
    def __init__(
        self,
        seed_code: str,
        evaluator: Path,
        device: str,
        cfg: SearchConfig,
        name: str,
        functions: tuple[str, ...] = ("evaluate",),
    ):
        self.fitness_label = COMBINED_LABEL
        self.fitness_kind = "score"
        self.interface = ""
        self.regimes: list[str] = []
        self.scenarios: list[tuple[str, str]] = []
        self.timed = False
        self.screens = False
        self.seed_code = seed_code
        self.evaluator = evaluator
        self.evaluator_sha256 = _sha(evaluator)
        self.functions = functions
        self.device = device
        self.cfg = cfg
        self.name = name
        grid = cfg.grid.features
        self.metric_features = tuple(
            f.split(":", 1)[1] for f in ([] if grid == "auto" else grid) if f.startswith("metric:")
        )
        try:
            doc = ast.get_docstring(pysource.parse(seed_code)) or ""
        except SyntaxError:
            doc = ""
        self.description = doc

    @classmethod
    def from_files(
        cls, program: Path, evaluator: Path, device: str, cfg: SearchConfig
    ) -> GenericProblem:
        code = read_program(program, single=False)
        functions = evaluator_functions(evaluator, read_user_file("--evaluator", evaluator))
        staged = cfg.evaluator.cascade != "off" and "evaluate_stage1" in functions
        if "evaluate" not in functions and not staged:
            raise ConfigError(f"--evaluator {evaluator}: defines no evaluate(path) function")
        return cls(code, evaluator.resolve(), device, cfg, f"generic:{program.stem}", functions)

    @classmethod
    def from_spec(
        cls, spec: dict[str, Any], device: str, cfg: SearchConfig, seed_code: str
    ) -> GenericProblem:
        evaluator = Path(spec["evaluator"])
        if not evaluator.is_file():
            raise ConfigError(f"the run's evaluator {evaluator} is gone; it cannot resume")
        if _sha(evaluator) != spec["evaluator_sha256"]:
            raise ConfigError(f"the run's evaluator {evaluator} changed since the run started")
        functions = tuple(spec.get("functions") or ("evaluate",))
        return cls(seed_code, evaluator, device, cfg, spec["name"], functions)

    def spec(self) -> dict[str, Any]:
        return {
            "kind": "generic",
            "name": self.name,
            "evaluator": str(self.evaluator),
            "evaluator_sha256": self.evaluator_sha256,
            "functions": list(self.functions),
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
            functions=self.functions,
            cascade=ev.cascade != "off",
            thresholds=tuple(ev.cascade_thresholds),
            features=self.metric_features,
        )

    def evaluate(
        self, code: str, *, gpu: int = 0, promote_above: float | None = None
    ) -> EvalResult:
        return run_job(self.job(code), gpu)

    def fitness(self, result: EvalResult) -> float | None:
        return fitness_of(result, self.metric_features)

    def regime_speedups(self, result: EvalResult) -> dict[str, float]:
        return {}

    def hardware(self, result: EvalResult | None) -> dict[str, Any]:
        return {"device": self.device}

    def features(self, result: EvalResult) -> dict[str, float]:
        metrics = metrics_of(result)
        out = {}
        for name in self.metric_features:
            value = metrics.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[name] = float(value)
        return out

    def label_for(self, seed: EvalResult) -> str:
        metrics = metrics_of(seed)
        if not metrics or "combined_score" in metrics:
            return COMBINED_LABEL
        _, source = score_of(metrics, self.metric_features)
        return f"{source}: no combined_score reported" if source.startswith("mean") else MEAN_LABEL
