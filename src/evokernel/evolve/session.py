"""Start or resume a search in a run directory, run it, and write its outputs.

A *run* is a search and its directory; a *session* is one invocation that works on it (the
first, and each `--resume`), from opening the directory to its stop. `Session` holds what a
session needs: the run directory and its lock, the database, the problem, the configuration
and the evaluation backend.

`open_session(request)` validates everything (flags, device, config, task, features, the
backend) before it creates the run directory, so a bad flag leaves nothing behind. A new run
stores its whole definition in the database's `meta` (problem, device, resolved config, worker
counts, target); `--resume` reads that back and accepts only `--iterations` (a new target) and
where evaluations run (`--backend`, `--ray-address`) on top: a different `--task`, `--program`,
`--evaluator`, `--config`, `--seed` or `--device` is refused. A resumed run that has nothing
left to do just reports.

Every session is recorded in `meta["sessions"]` (start, end, stop reason, backend); one that
ends with an error records it, so `status` says why the run stopped.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TextIO

from evokernel.errors import ConfigError, EvokernelError
from evokernel.evolve.backends import Backend, open_backend
from evokernel.evolve.config import MAX_ITERATIONS, SearchConfig, config_from_dict, read_config
from evokernel.evolve.controller import FINISHING, NO_CHILD, Controller, SeedFailed
from evokernel.evolve.database import SCHEMA_VERSION, Database
from evokernel.evolve.dispatch import DispatchEntry, format_table, write_outputs
from evokernel.evolve.map_elites import FeatureSpace, resolve_features
from evokernel.evolve.mutators.registry import MutatorSet
from evokernel.evolve.problem import KernelProblem, Problem, read_program
from evokernel.evolve.progress import Progress
from evokernel.evolve.rundir import RunDir, atomic_write
from evokernel.evolve.sections import INT_LIMIT
from evokernel.evolve.summary import RunSummary, summarize
from evokernel.evolve.types import code_digest


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
    backend: str | None = None  # local | ray: overrides backend.kind
    ray_address: str | None = None  # overrides backend.address
    strict: bool = False  # ignored OpenEvolve keys and an unusable LLM endpoint are errors
    offline: bool = False  # the built-in mutators only: LLM weights and models dropped
    # Filled by open_session: one line per thing the user should know (printed by the CLI).
    warnings: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    stop_reason: str
    summary: RunSummary
    table: list[DispatchEntry]
    problem: str = ""  # one line when the run could do nothing useful (no child proposed)
    notes: list[str] = field(default_factory=list)  # warnings, e.g. LLM proposals that failed

    def text(self) -> str:
        return format_table(self.summary, self.table)


def in_flight(cfg: SearchConfig, workers: int) -> int:
    """Iterations in flight at once: `in_flight`, or 0 = auto: the evaluation workers, plus
    the LLM requests that overlap them."""
    return cfg.in_flight or workers + (cfg.llm.max_concurrency if cfg.uses_llm else 0)


class Session:
    def __init__(
        self,
        run: RunDir,
        db: Database,
        problem: Problem,
        cfg: SearchConfig,
        space: FeatureSpace,
        lock: IO[str],
        backend: Backend,
        owns_backend: bool = True,
    ):
        self.run, self.db, self.problem, self.cfg, self.space = run, db, problem, cfg, space
        self.backend = backend
        self._owns_backend = owns_backend
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
            backend=self.backend,
            on_commit=progress.update,
        )
        started = time.time()
        try:
            progress.note(f"run {self.run.path}: {self.problem.name} on {self.problem.device}")
            progress.note(self.backend.describe())
            controller.ensure_seed()
            stop = controller.run(self.target, self.cfg.budget.wall_time_s)
        except SeedFailed:
            self._record("seed-failed", started, finished=True)
            raise
        except KeyboardInterrupt:
            self._record("interrupted", started, finished=False)
            raise
        except Exception as err:
            line = " ".join(str(err).split())
            if not isinstance(err, EvokernelError):
                line = f"{type(err).__name__}: {line}"
            self._record("error", started, finished=False, error=line)
            raise
        finally:
            progress.close()
        if controller.budget_message:
            print(f"stopped: {controller.budget_message}", file=stream)
        problem = ""
        if stop != "interrupted" and not self._proposed_any():
            stop = NO_CHILD
            rows = [p for p in self.db.programs if p.iteration >= 0 and not p.migrant]
            reasons: dict[str, int] = {}
            for row in rows:
                why = row.reasons[0] if row.reasons else "no program proposed"
                reasons[why] = reasons.get(why, 0) + 1
            problem = no_child_line(reasons)
        self._record(stop, started, finished=stop in FINISHING, error=problem)
        outcome = self._outputs(stop)
        outcome.problem = problem
        if not problem:
            outcome.notes = llm_failures(self.db.programs)
        return outcome

    def _proposed_any(self) -> bool:
        """Whether any iteration of the run got a child program (or none was run yet)."""
        rows = [p for p in self.db.programs if p.iteration >= 0 and not p.migrant]
        return not rows or any(p.code for p in rows)

    def build_mutators(self) -> MutatorSet:
        """The configured mutators, with the LLM tally restored from the last checkpoint."""
        from evokernel.evolve.llm.accounting import Accounting
        from evokernel.evolve.llm.config import LLMBudget
        from evokernel.evolve.mutators.registry import build_mutators

        budget = LLMBudget(tokens=self.cfg.budget.tokens, cost_usd=self.cfg.budget.cost_usd)
        saved = self.db.meta("accounting")
        accounting = Accounting.from_dict(saved, budget) if saved else Accounting(budget)
        m = self.cfg.mutators
        return build_mutators(m.weights, self.cfg.llm, m.offline, m.prompt, accounting)

    def _record(self, stop: str, started: float, finished: bool, error: str = "") -> None:
        entry = {"started": started, "ended": time.time(), "stop_reason": stop}
        entry["backend"] = self.backend.describe()
        if error:
            entry["error"] = error
        sessions = [*self.db.meta("sessions", []), entry]
        state: dict[str, Any] = {"finished": finished, "stop_reason": stop}
        if error:
            state["error"] = error
        # When the database itself is what failed, the original error is the one to report.
        with contextlib.suppress(EvokernelError):
            self.db.commit(meta={"state": state, "sessions": sessions})

    def _outputs(self, stop: str) -> Outcome:
        summary, table = write_outputs(self.db, self.run)
        return Outcome(stop, summary, table)

    def close(self) -> None:
        try:
            if self._owns_backend:
                self.backend.close()
        finally:
            self.db.close()
            self._lock.close()


def llm_failures(rows: list[Any]) -> list[str]:
    """One line when LLM proposals failed (an endpoint down for part of the run), with the
    most frequent reason: the database keeps every one, but the user should hear of it."""
    llm = [p for p in rows if p.kind.startswith("llm:") and not p.migrant and p.iteration >= 0]
    failed = [p for p in llm if p.status == "rejected" and not p.code]
    if not failed:
        return []
    reasons: dict[str, int] = {}
    for p in failed:
        why = p.reasons[0] if p.reasons else "no answer"
        reasons[why] = reasons.get(why, 0) + 1
    top = max(reasons.items(), key=lambda kv: kv[1])[0]
    return [f"{len(failed)} of {len(llm)} LLM proposals got no program; most often: {top}"[:400]]


def no_child_line(reasons: dict[str, int]) -> str:
    """Why no iteration got a child: the most frequent reasons, one line."""
    top = sorted(reasons.items(), key=lambda kv: -kv[1])[:2]
    why = "; ".join(f"{why} ({n}x)" for why, n in top) or "every proposal failed"
    return f"no child program could be proposed: {why}"[:600]


# --- flags -----------------------------------------------------------------------------------
def _check_iterations(iterations: int | None) -> None:
    if iterations is not None and not 0 <= iterations <= MAX_ITERATIONS:
        raise ConfigError(f"--iterations must be in [0, {MAX_ITERATIONS}], got {iterations}")


def _with_flags(cfg: SearchConfig, req: Request) -> SearchConfig:
    """`cfg` with the flags that override config keys, validated like the keys themselves."""
    if req.seed is not None and not 0 <= req.seed < INT_LIMIT:
        raise ConfigError(f"--seed must be in [0, {INT_LIMIT - 1}], got {req.seed}")
    data = cfg.to_dict()
    if req.iterations is not None:
        data["budget"]["iterations"] = req.iterations
    if req.seed is not None:
        data["seed"] = req.seed
    if req.backend is not None:
        data["backend"]["kind"] = req.backend
    if req.ray_address is not None:
        data["backend"]["address"] = req.ray_address
        if data["backend"]["kind"] != "ray":
            raise ConfigError("--ray-address is for the ray backend: add --backend ray")
    return config_from_dict(data)


def _problem(req: Request, device: str, cfg: SearchConfig) -> Problem:
    """--task [--program START.py] | --program P.py --evaluator E.py."""
    if req.task:
        if req.evaluator:
            raise ConfigError("--evaluator is for generic tasks: give it without --task")
        start = read_program(req.program) if req.program is not None else ""
        return KernelProblem(req.task, device, cfg, seed_code=start)
    if req.program and req.evaluator:
        from evokernel.evolve.generic import GenericProblem

        return GenericProblem.from_files(req.program, req.evaluator, device, cfg)
    raise ConfigError("evolve needs --task TASK, or --program P.py with --evaluator E.py")


def problem_from_spec(
    spec: dict[str, Any], device: str, cfg: SearchConfig, seed_code: str
) -> Problem:
    """Rebuild the problem a run was started with (for --resume), with its original seed."""
    if spec["kind"] == "kernel":
        return KernelProblem(spec["task"], device, cfg, seed_code)
    from evokernel.evolve.generic import GenericProblem

    return GenericProblem.from_spec(spec, device, cfg, seed_code)


def offline_only(cfg: SearchConfig) -> SearchConfig:
    """`cfg` with the LLM mutators and models dropped (the offline mutator weighs 1 when
    nothing else is left)."""
    data = cfg.to_dict()
    weights = {
        k: v for k, v in data["mutators"]["weights"].items() if k in ("offline", "crossover")
    }
    if not any(w > 0 for w in weights.values()):
        weights = {"offline": 1.0}
    data["mutators"]["weights"] = weights
    data["llm"]["models"] = []
    return config_from_dict(data)


def check_llm(cfg: SearchConfig, strict: bool, warnings: list[str]) -> None:
    """Probe the LLM endpoints a run will ask (one warning line per problem; an error under
    `strict`)."""
    llm_weight = sum(cfg.mutators.weights.get(n, 0) for n in ("llm_diff", "llm_rewrite"))
    if not cfg.llm.enabled or not (llm_weight or cfg.mutators.weights.get("crossover", 0)):
        return
    from evokernel.evolve.llm.probe import probe

    problems = probe(cfg.llm)
    if problems and strict:
        raise ConfigError(f"{problems[0]} (--strict)")
    warnings.extend(problems)


def _devices() -> Any:
    from evokernel import device

    return device


# --- new runs --------------------------------------------------------------------------------
def _create(req: Request) -> Session:
    _check_iterations(req.iterations)
    devices = _devices()
    device = devices.resolve(req.device)
    devices.prepare(device)
    cfg, notes = read_config(req.config, req.strict)
    req.warnings.extend(notes)
    cfg = _with_flags(cfg, req)
    if req.offline:
        cfg = offline_only(cfg)
    problem = _problem(req, device, cfg)
    check_llm(cfg, req.strict, req.warnings)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = req.out or Path("runs") / f"{problem.name.replace(':', '-')}-{stamp}"
    return create_session(out, problem, cfg)


def create_session(
    out: Path, problem: Problem, cfg: SearchConfig, backend: Backend | None = None
) -> Session:
    """A new run of `problem` in the new (or empty) directory `out`. `backend`: where its
    evaluations run (default: the one `cfg.backend` names, opened here and closed with the
    session)."""
    space = resolve_features(cfg.grid, problem.regimes, problem.seed_code, problem.timed)
    RunDir.check_new(out)  # before a backend is started
    owned = backend is None
    if backend is None:
        backend = open_backend(cfg, problem.device)
    try:
        run = RunDir.create(out)
        lock = run.lock()
        db = Database.create(run.db, synchronous=cfg.checkpoint.synchronous)
    except BaseException:
        if owned:
            backend.close()
        raise
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
        "workers": backend.workers,
        "lag": in_flight(cfg, backend.workers),
        "features": [f.key for f in space.features],
        "fitness_label": problem.fitness_label,
        "screens": problem.screens,
        "created": time.time(),
    }
    db.commit(meta=meta)
    atomic_write(run.config, cfg.to_yaml())
    return Session(run, db, problem, cfg, space, lock, backend, owned)


# --- resumed runs ----------------------------------------------------------------------------
def _resume(req: Request) -> Session:
    if req.out is None:
        raise ConfigError("--resume needs --out RUN_DIR")
    if req.config is not None:
        raise ConfigError("--config cannot change a run: --resume keeps RUN_DIR's configuration")
    _check_iterations(req.iterations)
    session = resume_session(
        req.out,
        req.iterations,
        req.device,
        req.seed,
        task=req.task,
        program=req.program,
        evaluator=req.evaluator,
        backend_kind=req.backend,
        ray_address=req.ray_address,
    )
    try:
        if req.offline and session.cfg.uses_llm:
            raise ConfigError("--offline cannot change a run: it was started with LLM mutators")
        check_llm(session.cfg, req.strict, req.warnings)
    except BaseException:
        session.close()
        raise
    return session


def _same_problem(
    db: Database, run: Path, task: str | None, program: Path | None, evaluator: Path | None
) -> None:
    """Refuse flags that name another problem than the stored one."""
    spec = db.meta("problem") or {}
    kind = spec.get("kind")
    if task is not None and (kind != "kernel" or spec.get("task") != task):
        runs = spec.get("task") if kind == "kernel" else f"the generic program {spec.get('name')}"
        raise ConfigError(f"{run} runs {runs}; --task cannot change a run")
    started_from = code_digest(str(db.meta("seed_code", "")))
    single = kind == "kernel"
    if program is not None and code_digest(read_program(program, single=single)) != started_from:
        raise ConfigError(
            f"{run} started from other code than {program}; --program cannot change a run"
        )
    if evaluator is not None:
        stored = spec.get("evaluator")
        if kind != "generic" or Path(evaluator).resolve() != Path(str(stored)):
            raise ConfigError(
                f"{run} is evaluated by {stored or 'its kernel task'}; "
                "--evaluator cannot change a run"
            )


def resume_session(
    out: Path,
    iterations: int | None = None,
    device: str | None = None,
    seed: int | None = None,
    problem: Problem | None = None,
    *,
    task: str | None = None,
    program: Path | None = None,
    evaluator: Path | None = None,
    backend_kind: str | None = None,
    ray_address: str | None = None,
    backend: Backend | None = None,
) -> Session:
    """The run in `out`, to continue; `iterations` sets a new target. `task`, `program`,
    `evaluator`, `device` and `seed`, when given, must match the run's. `problem` stands for
    the stored problem (its `spec()` must match; tests use it to evaluate in-process).
    `backend_kind`/`ray_address` choose where this session evaluates (default: the run's
    configuration); `backend` hands over an open one instead."""
    run = RunDir.open(out)
    lock = run.lock()
    try:
        db = Database(run.db)
    except BaseException:
        lock.close()
        raise
    try:
        stored = str(db.meta("device"))
        if device is not None and _devices().resolve(device) != stored:
            raise ConfigError(f"{run.path} runs on {stored}; it cannot resume on {device}")
        cfg = config_from_dict(db.meta("config"))
        if seed is not None and seed != cfg.seed:
            raise ConfigError(f"{run.path} uses seed {cfg.seed}; --seed cannot change it")
        _same_problem(db, run.path, task, program, evaluator)
        if backend_kind is not None or ray_address is not None:
            cfg = _with_flags(cfg, Request(backend=backend_kind, ray_address=ray_address))
        if problem is None:
            # The stored problem runs here again: its device must exist (a CUDA run cannot
            # resume on a machine without one) and set the Triton mode, as when it was created.
            devices = _devices()
            devices.prepare(devices.resolve(stored))
            problem = problem_from_spec(db.meta("problem"), stored, cfg, db.meta("seed_code"))
        elif problem.spec() != db.meta("problem"):
            raise ConfigError(f"{run.path} runs another problem: {db.meta('problem')}")
        space = resolve_features(cfg.grid, problem.regimes, problem.seed_code, problem.timed)
        done = summarize(db).iterations_done
        if iterations is not None and iterations < done:
            raise ConfigError(
                f"--iterations {iterations} is below the {done} iterations {run.path} has done"
            )
        owned = backend is None
        if backend is None:
            backend = open_backend(cfg, problem.device)
    except BaseException:
        db.close()
        lock.close()
        raise
    if iterations is not None and iterations != db.meta("iterations_target"):
        state = {"finished": False, "stop_reason": ""}
        db.commit(meta={"iterations_target": iterations, "state": state})
    return Session(run, db, problem, cfg, space, lock, backend, owned)


def open_session(req: Request) -> Session:
    return _resume(req) if req.resume else _create(req)


def run_search(
    problem: Problem,
    cfg: SearchConfig,
    out: Path,
    *,
    backend: Backend | None = None,
    resume: bool = False,
    iterations: int | None = None,
    stream: TextIO | None = None,
    live: bool = False,
) -> Outcome:
    """Run one search of `problem` in `out` to its end (or continue it with `resume`), on
    `backend` (default: the one `cfg.backend` names). The Python form of `evokernel evolve`."""
    if resume:
        session = resume_session(out, iterations, problem=problem, backend=backend)
    else:
        if iterations is not None:
            cfg = _with_flags(cfg, Request(iterations=iterations))
        session = create_session(out, problem, cfg, backend)
    try:
        return session.execute(stream=stream, live=live)
    finally:
        session.close()
