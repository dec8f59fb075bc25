"""`evokernel tune`: search every engine task at a checkpoint's shapes, then write a pack.

    outcome = tune(TuneRequest(model_dir, out, budget_minutes=30), stream=sys.stdout)

For each engine task (`engine_tasks(cfg)`; today `decode_layer` at the checkpoint's shapes;
none for a quantized checkpoint, whose packed kernels' launch choices are measured instead,
tune/quant.py, and kept in the pack only when the whole step confirms them)
the evolutionary search of `evokernel evolve` (evolve/session.py, the offline mutator unless
the configuration gives others weight) runs in PACK_DIR/runs/<task>: a new run the first time,
the same run resumed afterwards. Then `write_pack` writes PACK_DIR/pack.json and programs/,
and on a GPU `confirm_pack` keeps each program only where the whole decode step, timed
interleaved with and without the pack, is faster with it (tune/confirm.py).

Budget: `budget_minutes` is this invocation's wall-clock budget, shared evenly by the tasks
still to run (each session stops launching new iterations when its share is spent; those in
flight finish). `iterations` is the run's iteration target (as `evolve --iterations`). Without
it, a budget alone searches until the budget is spent; with neither, a new run takes the
configuration's `budget.iterations` and a resumed run goes on to its own target (a run that
only had a budget: the configuration's, never below what it has done). On a quantized
checkpoint the budget also bounds the launch sweep (tune/quant.py: no setting measured and no
confirmation started after it; `iterations` does not apply there). A resumed run keeps its
stored configuration: `config` must then match it (budget and backend aside) or is refused.
A PACK_DIR whose pack.json is for another GPU model or model shape is refused, and so is one
whose pack.json is not a regular file (never replaced), or an unusable pack key
(engine/packs/trust.py): all before the search starts.

Interrupted (KeyboardInterrupt: the CLI turns SIGINT and SIGTERM into one), the search stops,
its run records where it stood, and no pack is written from it: the interrupt propagates, and
a pack.json this invocation had begun to replace (an interrupt while confirming on a GPU) is
put back as it was. Running tune again resumes the run to the result an uninterrupted tune
gives. On the CPU the search runs the task's stand-in layer (smaller than the checkpoint's:
tasks/decode_layer/scenarios.py), which tune says, and the pack records (`measured`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from evokernel.engine.packs.format import PACK_FILE, RUNS_DIR, Pack, safe_name
from evokernel.engine.packs.trust import ensure_key
from evokernel.errors import ConfigError
from evokernel.files import FileRefused, output_file
from evokernel.model.config import ModelConfig
from evokernel.tasks import engine_tasks

if TYPE_CHECKING:
    from evokernel.evolve.backends.base import Backend, Evaluation
    from evokernel.evolve.problem import Problem


@dataclass
class TuneRequest:
    model_dir: Path
    out: Path
    budget_minutes: float | None = None
    iterations: int | None = None
    device: str | None = None
    config: Path | None = None


@dataclass
class TaskRun:
    task: str
    run_dir: Path
    resumed: bool
    stop_reason: str
    text: str  # the run's end-of-session summary (evolve's table)


@dataclass
class TuneOutcome:
    pack: Pack
    runs: list[TaskRun] = field(default_factory=list)


def tune(req: TuneRequest, stream: TextIO | None = None) -> TuneOutcome:
    """Run (or resume) each engine task's search into req.out/runs/<task>, then write the
    pack in req.out. Bad input raises a one-line `EvokernelError` before anything is created;
    an interrupt propagates (KeyboardInterrupt) after the run has recorded it."""
    from evokernel import device as devices
    from evokernel.evolve.config import MAX_ITERATIONS, MAX_SECONDS, load_config
    from evokernel.tune.write import write_pack

    out = stream or sys.stdout
    if req.iterations is not None and not 0 <= req.iterations <= MAX_ITERATIONS:
        raise ConfigError(f"--iterations must be in [0, {MAX_ITERATIONS}], got {req.iterations}")
    if req.budget_minutes is not None and not 0 < req.budget_minutes * 60 <= MAX_SECONDS:
        raise ConfigError(f"--budget-minutes must be in (0, {MAX_SECONDS / 60:g}]")
    cfg = ModelConfig.from_dir(req.model_dir)
    search_cfg = load_config(req.config)
    device = devices.resolve(req.device)
    devices.prepare(device)
    if req.out.exists() and not req.out.is_dir():
        raise ConfigError(f"--out: {req.out} is not a directory")
    try:
        output_file(req.out / PACK_FILE)
    except FileRefused as err:
        raise ConfigError(f"--out: {err}") from None
    _same_pack(req.out, cfg, device)
    ensure_key()  # tune signs the pack it writes: an unusable key is found before the search
    tasks = engine_tasks(cfg)
    started = time.monotonic()
    runs = []
    for i, task in enumerate(tasks):
        wall = search_cfg.budget.wall_time_s
        if req.budget_minutes is not None:
            left = req.budget_minutes * 60 - (time.monotonic() - started)
            wall = max(left / (len(tasks) - i), 0.001)  # 0 would mean "no limit"
        run_dir = req.out / RUNS_DIR / safe_name(task)
        if device == "cpu":
            _say_stand_in(task, cfg, out)
        run = _search(task, run_dir, device, req, wall, out)
        if run.stop_reason == "interrupted":  # the search caught it and recorded its state
            raise KeyboardInterrupt
        runs.append(run)
    launch = None
    deadline = None if req.budget_minutes is None else started + req.budget_minutes * 60
    if cfg.quantization is not None:  # the packed kernels' launch choices, measured here
        from evokernel.tune.quant import search_launch

        launch = search_launch(req.model_dir, device, out, deadline)
    previous = _previous_pack(req.out)
    try:
        pack = write_pack([r.run_dir for r in runs], cfg, req.out, device, quantized=launch)
        if device == "cuda":  # a task scenario's win kept only where the whole step is faster
            from evokernel.tune.confirm import confirm_pack
            from evokernel.tune.quant import confirm_launch

            pack = confirm_pack(pack, req.model_dir, device, out)
            pack = confirm_launch(pack, req.model_dir, device, out, deadline)
    except BaseException:
        _put_back(req.out, previous)
        raise
    return TuneOutcome(pack, runs)


def _say_stand_in(task: str, cfg: ModelConfig, stream: TextIO) -> None:
    """On the CPU the task's scenarios run a stand-in of the checkpoint's layer: say so."""
    from evokernel.engine.packs.format import describe_shape, shape_key
    from evokernel.tasks import get_task
    from evokernel.tune.write import measured_shape

    measured = measured_shape(get_task(task).scenarios("cpu"), cfg)
    if measured is None or not measured["stand_in"]:
        return
    print(
        f"tune {task}: on the CPU the search runs a stand-in layer ({describe_shape(measured)}) "
        f"instead of this checkpoint's ({describe_shape(shape_key(cfg, 'float32'))}), under "
        "Triton's interpreter: it shows the search working; nothing is timed, and the pack "
        "keeps the engine's own layer in every bucket",
        file=stream,
    )


def _previous_pack(out: Path) -> bytes | None:
    """pack.json as it was before this invocation writes one (None: there was none)."""
    from evokernel.files import read_regular

    try:
        return read_regular(out / PACK_FILE)
    except FileNotFoundError:
        return None


def _put_back(out: Path, previous: bytes | None) -> None:
    """Undo a pack.json written by an invocation that did not finish: no pack from it."""
    file = out / PACK_FILE
    with contextlib.suppress(OSError):
        if previous is None:
            file.unlink(missing_ok=True)
        else:
            tmp = file.with_name(f".{PACK_FILE}.restore")
            tmp.write_bytes(previous)
            os.replace(tmp, file)


def _same_pack(out: Path, cfg: ModelConfig, device: str) -> None:
    """Refuse a PACK_DIR whose pack.json was tuned on another GPU model or for another model
    shape: its runs' timings would mix with this machine's, or its programs not fit."""
    from evokernel.engine.packs.format import PackError
    from evokernel.engine.packs.load import load_pack

    if not (out / PACK_FILE).exists():
        return
    try:
        load_pack(out, cfg, device)
    except PackError as err:
        raise PackError(f"--out: {err}; choose another --out") from None


def _search(
    task: str, run_dir: Path, device: str, req: TuneRequest, wall_s: float, stream: TextIO
) -> TaskRun:
    from evokernel.evolve.config import MAX_ITERATIONS, config_from_dict, load_config
    from evokernel.evolve.problem import KernelProblem
    from evokernel.evolve.rundir import RunDir
    from evokernel.evolve.session import Session, create_session, resume_session
    from evokernel.evolve.summary import summarize

    wanted = load_config(req.config)
    resumed = RunDir(run_dir).exists()
    session: Session
    if resumed:
        print(f"tune {task}: resuming {run_dir}", file=stream)
        session = resume_session(run_dir, device=device, task=task)
        try:
            if req.config is not None and _differs(wanted.to_dict(), session.cfg.to_dict()):
                raise ConfigError(
                    f"{run_dir} was started with another configuration than {req.config}; "
                    "a resumed run keeps its own (give the same file, or none)"
                )
            done = summarize(session.db).iterations_done
            target = _target(req, wanted.budget.iterations, MAX_ITERATIONS)
            if req.iterations is None and req.budget_minutes is None:
                # Neither flag: go on to the run's own target; a budget-only run's (unlimited)
                # or a given --config's becomes the configured one, never below what is done.
                kept = session.target < MAX_ITERATIONS and req.config is None
                target = session.target if kept else max(target, done)
            if target < done:
                raise ConfigError(
                    f"--iterations {target} is below the {done} iterations {run_dir} has done"
                )
            if target != session.target:
                state = {"finished": False, "stop_reason": ""}
                session.db.commit(meta={"iterations_target": target, "state": state})
        except BaseException:
            session.close()
            raise
    else:
        print(f"tune {task}: new run in {run_dir}", file=stream)
        data = wanted.to_dict()
        data["budget"]["iterations"] = _target(req, wanted.budget.iterations, MAX_ITERATIONS)
        data["budget"]["wall_time_s"] = wall_s
        search_cfg = config_from_dict(data)
        problem = KernelProblem(task, device, search_cfg)
        session = create_session(run_dir, problem, search_cfg)
    data = session.cfg.to_dict()
    data["budget"]["wall_time_s"] = wall_s
    session.cfg = config_from_dict(data)  # this session's budget; the rest stays the run's
    backend = session.backend = _Settling(session.backend)
    try:
        outcome = session.execute(stream=stream)
        if outcome.stop_reason == "interrupted":
            backend.settle()
    except KeyboardInterrupt:
        backend.settle()
        raise
    finally:
        session.close()
    return TaskRun(task, run_dir, resumed, outcome.stop_reason, outcome.text())


class _Settling:
    """The search's backend, noting the evaluations in flight, so that an interrupted tune
    can end them before this process exits: their worker processes are killed (and their
    scratch directories removed) and their threads return. A daemon thread still inside
    torch's C++ code when the interpreter exits aborts the process ("terminate called
    without an active exception"), which a Ctrl-C must not do."""

    SETTLE_S = 30.0

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.name = inner.name
        self.workers = inner.workers
        self._pending: set[Future[Evaluation]] = set()
        self._lock = threading.Lock()

    def submit(
        self, problem: Problem, code: str, promote_above: float | None = None
    ) -> Future[Evaluation]:
        # An interrupt between handing the evaluation over and noting its future would leave
        # one running unseen: SIGINT/SIGTERM wait (blocked) until it is noted.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            future = self._inner.submit(problem, code, promote_above)
            with self._lock:
                self._pending.add(future)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: Future[Evaluation]) -> None:
        with self._lock:
            self._pending.discard(future)

    def describe(self) -> str:
        return self._inner.describe()

    def close(self) -> None:
        self._inner.close()

    def settle(self) -> None:
        """Until the evaluations in flight have returned (at most SETTLE_S): kill their worker
        processes, again as new ones start (an evaluation may not have reached its worker yet);
        then close the evaluator's idle workers."""
        from evokernel.evaluate.process.launch import abort_all
        from evokernel.evaluate.process.pool import POOL

        deadline = time.monotonic() + self.SETTLE_S
        while time.monotonic() < deadline:
            abort_all("interrupted")
            with self._lock:
                pending = list(self._pending)
            if not wait(pending, timeout=0.2).not_done:
                break
        POOL.drain()


def _target(req: TuneRequest, configured: int, unlimited: int) -> int:
    if req.iterations is not None:
        return req.iterations
    return unlimited if req.budget_minutes is not None else configured


def _differs(a: dict, b: dict) -> bool:
    """Whether two configurations differ beyond what a resumed run may change."""

    def core(d: dict) -> dict:
        return {k: v for k, v in d.items() if k not in ("budget", "backend")}

    return core(a) != core(b)


__all__ = ["TuneOutcome", "TuneRequest", "tune"]
