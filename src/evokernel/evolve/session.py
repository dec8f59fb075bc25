"""Start or resume a search in a run directory, run it, and write its outputs.

`open_session(request)` validates everything (device, config, task, features) before it
creates the run directory, so a bad flag leaves nothing behind. A new run stores its whole
definition in the database's `meta` (problem, device, resolved config, worker counts, target);
`--resume` reads that back and accepts only `--iterations` (a new target) on top. A resumed
run that has nothing left to do just reports.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO

from evokernel import device as devices
from evokernel.errors import ConfigError
from evokernel.evolve.config import SearchConfig, config_from_dict, load_config
from evokernel.evolve.controller import FINISHING, Controller, SeedFailed
from evokernel.evolve.database import SCHEMA_VERSION, Database
from evokernel.evolve.dispatch import DispatchEntry, format_table, write_outputs
from evokernel.evolve.llm.accounting import Accounting
from evokernel.evolve.llm.config import LLMBudget
from evokernel.evolve.map_elites import FeatureSpace, resolve_features
from evokernel.evolve.mutators.registry import MutatorSet, build_mutators
from evokernel.evolve.problem import KernelProblem, Problem, problem_from_spec
from evokernel.evolve.progress import Progress
from evokernel.evolve.rundir import RunDir, atomic_write
from evokernel.evolve.summary import RunSummary, summarize
from evokernel.tasks import blocks


@dataclass
class Request:
    task: str | None = None
    program: Path | None = None  # generic task: the program; with a task: the start program
    evaluator: Path | None = None  # generic task: the file defining evaluate(path) -> dict
    config: Path | None = None
    iterations: int | None = None
    out: Path | None = None
    resume: bool = False
    device: str | None = None
    seed: int | None = None


@dataclass
class Outcome:
    stop_reason: str
    summary: RunSummary
    table: list[DispatchEntry]

    def text(self) -> str:
        return format_table(self.summary, self.table)


def _workers(cfg: SearchConfig, device: str) -> tuple[int, int]:
    """(evaluation workers, iterations in flight) with the config's 0 = auto resolved."""
    workers = cfg.evaluator.workers
    if workers == 0:
        import torch

        workers = max(1, torch.cuda.device_count()) if device == "cuda" else 1
    lag = cfg.in_flight or workers + (cfg.llm.max_concurrency if cfg.uses_llm else 0)
    return workers, lag


class Session:
    def __init__(
        self,
        run: RunDir,
        db: Database,
        problem: Problem,
        cfg: SearchConfig,
        space: FeatureSpace,
        lock: IO[str],
    ):
        self.run, self.db, self.problem, self.cfg, self.space = run, db, problem, cfg, space
        self._lock = lock

    @property
    def target(self) -> int:
        return int(self.db.meta("iterations_target", 0))

    def execute(
        self,
        mutators: MutatorSet | None = None,
        stream: TextIO | None = None,
        live: bool | None = None,
    ) -> Outcome:
        """Run the search to its target or budget; write and return the outputs."""
        stream = stream or sys.stdout
        state = self.db.meta("state", {})
        done = summarize(self.db).iterations_done
        budget_spent = state.get("stop_reason") != "iterations"
        if state.get("finished") and (done >= self.target or budget_spent):
            print(f"{self.run.path}: run already finished ({state['stop_reason']})", file=stream)
            return self._outputs(state["stop_reason"])
        if mutators is None:
            mutators = self.build_mutators()
        progress = Progress(self.db, stream, live)
        controller = Controller(
            self.db,
            self.run,
            self.problem,
            self.cfg,
            mutators,
            self.space,
            lag=int(self.db.meta("lag", 1)),
            workers=int(self.db.meta("workers", 1)),
            on_commit=progress.update,
        )
        started = time.time()
        try:
            controller.ensure_seed()
            progress.note(f"run {self.run.path}: {self.problem.name} on {self.problem.device}")
            stop = controller.run(self.target, self.cfg.budget.wall_time_s)
        except SeedFailed:
            self._record("seed-failed", started, finished=True)
            raise
        finally:
            progress.close()
        if controller.budget_message:
            print(f"stopped: {controller.budget_message}", file=stream)
        self._record(stop, started, finished=stop in FINISHING)
        return self._outputs(stop)

    def build_mutators(self) -> MutatorSet:
        """The configured mutators, with the LLM tally restored from the last checkpoint."""
        budget = LLMBudget(tokens=self.cfg.budget.tokens, cost_usd=self.cfg.budget.cost_usd)
        saved = self.db.meta("accounting")
        accounting = Accounting.from_dict(saved, budget) if saved else Accounting(budget)
        m = self.cfg.mutators
        return build_mutators(m.weights, self.cfg.llm, m.offline, m.prompt, accounting)

    def _record(self, stop: str, started: float, finished: bool) -> None:
        sessions = [*self.db.meta("sessions", []), {"started": started, "ended": time.time()}]
        sessions[-1]["stop_reason"] = stop
        state = {"finished": finished, "stop_reason": stop}
        self.db.commit(meta={"state": state, "sessions": sessions})

    def _outputs(self, stop: str) -> Outcome:
        summary, table = write_outputs(self.db, self.run)
        return Outcome(stop, summary, table)

    def close(self) -> None:
        self.db.close()
        self._lock.close()


def _problem(req: Request, device: str, cfg: SearchConfig) -> Problem:
    """--task [--program START.py] | --program P.py --evaluator E.py."""
    if req.task:
        if req.evaluator:
            raise ConfigError("--evaluator is for generic tasks: give it without --task")
        start = ""
        if req.program is not None:
            if not req.program.is_file():
                raise ConfigError(f"--program: no such file: {req.program}")
            start = req.program.read_text()
            try:
                blocks.find_block(start)
            except blocks.BlockError as err:
                raise ConfigError(f"--program {req.program}: {err}") from None
        return KernelProblem(req.task, device, cfg, seed_code=start)
    if req.program and req.evaluator:
        from evokernel.evolve.generic import GenericProblem

        return GenericProblem.from_files(req.program, req.evaluator, device, cfg)
    raise ConfigError("evolve needs --task TASK, or --program P.py with --evaluator E.py")


def _create(req: Request) -> Session:
    device = devices.resolve(req.device)
    devices.prepare(device)
    cfg = load_config(req.config)
    if req.iterations is not None:
        cfg.budget.iterations = req.iterations
    if req.seed is not None:
        cfg.seed = req.seed
    problem = _problem(req, device, cfg)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = req.out or Path("runs") / f"{problem.name.replace(':', '-')}-{stamp}"
    return create_session(out, problem, cfg)


def create_session(out: Path, problem: Problem, cfg: SearchConfig) -> Session:
    """A new run of `problem` in the new (or empty) directory `out`."""
    space = resolve_features(cfg.grid, problem.regimes, problem.seed_code, problem.timed)
    workers, lag = _workers(cfg, problem.device)
    run = RunDir.create(out)
    lock = run.lock()
    db = Database(run.db, synchronous=cfg.checkpoint.synchronous)
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "problem": problem.spec(),
        "name": problem.name,
        "scenarios": problem.scenarios,
        "seed_code": problem.seed_code,
        "device": problem.device,
        "config": cfg.to_dict(),
        "iterations_target": cfg.budget.iterations,
        "islands": cfg.islands.count,
        "workers": workers,
        "lag": lag,
        "features": [f.key for f in space.features],
        "fitness_label": problem.fitness_label,
        "created": time.time(),
    }
    db.commit(meta=meta)
    atomic_write(run.config, cfg.to_yaml())
    return Session(run, db, problem, cfg, space, lock)


def _resume(req: Request) -> Session:
    if req.out is None:
        raise ConfigError("--resume needs --out RUN_DIR")
    if req.config is not None:
        raise ConfigError("--config cannot change a run: --resume keeps RUN_DIR's configuration")
    return resume_session(req.out, req.iterations, req.device, req.seed)


def resume_session(
    out: Path,
    iterations: int | None = None,
    device: str | None = None,
    seed: int | None = None,
    problem: Problem | None = None,
) -> Session:
    """The run in `out`, to continue; `iterations` sets a new target. `problem` replaces the
    stored problem definition (tests)."""
    run = RunDir.open(out)
    lock = run.lock()
    db = Database(run.db)
    stored = str(db.meta("device"))
    if device is not None and devices.resolve(device) != stored:
        raise ConfigError(f"{run.path} runs on {stored}; it cannot resume on {device}")
    cfg = config_from_dict(db.meta("config"))
    if seed is not None and seed != cfg.seed:
        raise ConfigError(f"{run.path} uses seed {cfg.seed}; --seed cannot change it")
    if problem is None:
        # The stored problem runs here again: its device must exist (a CUDA run cannot resume
        # on a machine without one) and set the Triton mode, as when the run was created.
        devices.prepare(devices.resolve(stored))
        problem = problem_from_spec(db.meta("problem"), stored, cfg, db.meta("seed_code"))
    space = resolve_features(cfg.grid, problem.regimes, problem.seed_code, problem.timed)
    if iterations is not None and iterations != db.meta("iterations_target"):
        state = {"finished": False, "stop_reason": ""}
        db.commit(meta={"iterations_target": iterations, "state": state})
    return Session(run, db, problem, cfg, space, lock)


def open_session(req: Request) -> Session:
    return _resume(req) if req.resume else _create(req)
