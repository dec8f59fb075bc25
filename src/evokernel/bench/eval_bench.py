"""Evaluator throughput: a fixed set of honest programs through the evaluator, as a search runs it.

    doc = run_eval_bench(EvalBenchOptions(...), progress=print)

The programs are the task seeds with their declared knob values (`blocks.knob_space`), every
one of them an honest program: `--sweep` takes each task's whole declared space, otherwise
`programs` settings per task evenly spaced over it (always the same ones). The tasks' programs
are interleaved in one queue and evaluated by `workers` threads calling `evaluate(...,
gpu=i mod n)`, exactly as the search's local backend does (default: the evaluator's
`default_workers`, with the default `EvalOptions`: every check kept). A thread starts no new
evaluation past `max_minutes`; programs not started are counted as such.

Reported, per task and in total:
  evals_per_min      evaluations finished per minute of wall time (the batch's, first worker
                     start-ups and calibrations included)
  phases_s           mean seconds per evaluation of each phase of the evaluator's `phases`
                     artifact: startup (waiting for a ready worker), load, correctness, timing
                     (of which timing_wait: waiting for the device, timing_held: holding it,
                     timing_rounds: the worker's time in the timed rounds within the hold)
                     and counters inside them: shared_wait / shared_held (the device's shared
                     lock: correctness jobs, timing inputs, profiler passes) and
                     reference_wait (waiting for the parent's float64 references)
  gpu_held_s         mean seconds per evaluation holding a GPU exclusively (timed rounds)
  false_rejections   programs rejected (every program is honest: each rejection is the
                     evaluator's error, or a declared knob value that does not work), listed
                     with their knobs and reasons
  screened           programs the cascade stopped after its screen (`promote_above` only)

and, in `evaluations`, one entry per evaluation in the order they finished: task, index,
knobs, correct, wall_s, its phases, its `timing` artifact (the spin per scenario and the
input copies) and per scenario the candidate's and the fastest baseline's median device time
(`median_us`), for telling a slow evaluation's cause from the batch's mean.

The document (`kind: evokernel-bench-eval`) is written as JSON; `format_table` renders it.
`"complete": false` marks a document written while the bench still ran (the CLI rewrites its
file after every evaluation, so an interrupted bench leaves what it measured).
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokernel.evaluate.options import EvalOptions
from evokernel.evaluate.result import EvalResult
from evokernel.tasks import blocks, get_task

TASKS = ("decode_linear", "gqa_decode_attention")
PHASES = (
    "startup",
    "load",
    "correctness",
    "timing",
    "timing_wait",
    "timing_held",
    "timing_rounds",
    "shared_wait",
    "shared_held",
    "reference_wait",
)
KIND = "evokernel-bench-eval"


@dataclass(frozen=True)
class EvalBenchOptions:
    device: str
    tasks: tuple[str, ...] = TASKS
    programs: int = 8  # per task, evenly spaced over its knob space; 0: the whole space
    workers: int = 0  # 0: the evaluator's default_workers
    max_minutes: float = 0.0  # 0: no limit
    options: EvalOptions = field(default_factory=EvalOptions)
    command: str = ""


@dataclass(frozen=True)
class Program:
    task: str
    index: int  # position in the task's declared knob space
    knobs: dict[str, Any]
    code: str


def programs_for(task: str, count: int) -> list[Program]:
    """`count` settings of the task seed's knob space, evenly spaced (0: all of them)."""
    seed = get_task(task).seed_candidate.read_text()
    space = blocks.knob_space(seed)
    if 0 < count < len(space):
        picks = sorted({round(i * (len(space) - 1) / max(1, count - 1)) for i in range(count)})
    else:
        picks = list(range(len(space)))
    setter = blocks.knob_setter(seed)
    return [Program(task, i, space[i], setter(space[i])) for i in picks]


def interleaved(lists: list[list[Program]]) -> list[Program]:
    """One queue taking from each task in turn, so no task's programs run alone at the end."""
    out: list[Program] = []
    for i in range(max((len(x) for x in lists), default=0)):
        out.extend(x[i] for x in lists if i < len(x))
    return out


def _phases(result: EvalResult) -> dict[str, float]:
    try:
        raw = json.loads(result.artifacts.get("phases", "{}"))
    except ValueError:
        return {}
    return {k: float(v) for k, v in raw.items() if isinstance(v, (int, float))}


def summarize(done: list[tuple[Program, EvalResult]], wall_s: float, planned: int) -> dict:
    """The figures of one group of evaluated programs (see the module docstring)."""
    phases = [_phases(r) for _, r in done]
    mean = {
        name: round(statistics.fmean([ph.get(name, 0.0) for ph in phases]), 3) if phases else 0.0
        for name in PHASES
    }
    rejected = [
        {"task": p.task, "index": p.index, "knobs": p.knobs, "reasons": r.reasons[:3]}
        for p, r in done
        if not r.correct
    ]
    walls = [r.wall_s for _, r in done]
    return {
        "planned": planned,
        "evaluations": len(done),
        "not_started": planned - len(done),
        "wall_s": round(wall_s, 1),
        "evals_per_min": round(60.0 * len(done) / wall_s, 2) if wall_s > 0 else 0.0,
        "eval_wall_s": round(statistics.fmean(walls), 2) if walls else 0.0,
        "phases_s": mean,
        "gpu_held_s": mean["timing_held"],
        "false_rejections": len(rejected),
        "rejected": rejected,
        "screened": sum(1 for _, r in done if r.correct and r.stage == "screened"),
    }


def run_eval_bench(
    opts: EvalBenchOptions,
    progress: Callable[[str], None] = lambda _line: None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run the bench; the document at the end. `checkpoint`, when given, receives the
    document of what is done so far (`"complete": false`) after every evaluation, so an
    interrupted bench leaves its figures behind."""
    from evokernel.evaluate import default_workers, evaluate
    from evokernel.evaluate.locks import slot_count

    queue = interleaved([programs_for(t, opts.programs) for t in opts.tasks])
    workers = opts.workers or default_workers(opts.device)
    gpus = slot_count(opts.device)
    deadline = time.monotonic() + opts.max_minutes * 60 if opts.max_minutes > 0 else None
    done: list[tuple[Program, EvalResult]] = []
    lock = threading.Lock()
    t0 = time.monotonic()

    stopping = threading.Event()

    def work(worker: int) -> None:
        try:
            run_worker(worker)
        except BaseException:  # stopped under it (an interrupt): nothing to report
            if not stopping.is_set():
                raise

    def run_worker(worker: int) -> None:
        while not stopping.is_set():
            with lock:
                if not queue or (deadline is not None and time.monotonic() > deadline):
                    return
                program = queue.pop(0)
            result = evaluate(
                program.task, program.code, opts.device, opts.options, gpu=worker % gpus
            )
            if stopping.is_set():
                return
            with lock:
                done.append((program, result))
                n, elapsed = len(done), time.monotonic() - t0
                if checkpoint is not None:
                    checkpoint(_document(opts, list(done), planned, elapsed, workers, False))
            verdict = "ok" if result.correct else f"REJECTED {result.reason_codes}"
            progress(
                f"[{n}] {program.task} #{program.index} {program.knobs}: {verdict}, "
                f"{result.wall_s:.1f} s ({60 * n / elapsed:.1f} evals/min so far)"
            )

    planned = len(queue)
    threads = [
        threading.Thread(target=work, args=(i,), name=f"bench-eval-{i}", daemon=True)
        for i in range(workers)
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:
        # An interrupt: no new evaluation starts, the running ones are killed, and their
        # threads return (removing their scratch directories) before the interrupt goes on.
        stopping.set()
        _stop(threads)
        raise
    return _document(opts, done, planned, time.monotonic() - t0, workers, True)


def _stop(threads: list[threading.Thread], within_s: float = 10.0) -> None:
    from evokernel.evaluate.process.launch import abort_all
    from evokernel.reasons import reason

    deadline = time.monotonic() + within_s
    line = reason("infrastructure", "the bench was interrupted")
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        abort_all(line)
        for t in threads:
            t.join(timeout=0.1)


def _document(
    opts: EvalBenchOptions,
    done: list[tuple[Program, EvalResult]],
    planned: int,
    wall_s: float,
    workers: int,
    complete: bool,
) -> dict[str, Any]:
    hardware = next((r.device.name for _, r in done if r.device is not None and r.device.name), "")
    per_task = {}
    for task in opts.tasks:
        mine = [(p, r) for p, r in done if p.task == task]
        size = blocks.knob_space_size(get_task(task).seed_candidate.read_text())
        picked = len(programs_for(task, opts.programs))
        per_task[task] = {"knob_space": size, **summarize(mine, wall_s, picked)}
    return {
        "kind": KIND,
        "complete": complete,
        "device": opts.device,
        "hardware": hardware,
        "command": opts.command,
        "workers": workers,
        "options": {
            "reps": opts.options.resolved(opts.device).reps,
            "profile": opts.options.profile,
            "hidden": opts.options.hidden,
            "cascade": None
            if opts.options.cascade is None
            else {
                "scenarios": list(opts.options.cascade.scenarios),
                "promote_above": opts.options.cascade.promote_above,
            },
            "max_minutes": opts.max_minutes,
        },
        "tasks": per_task,
        "total": summarize(done, wall_s, planned),
        "evaluations": [_entry(p, r) for p, r in done],
    }


def _entry(program: Program, result: EvalResult) -> dict[str, Any]:
    try:
        timing = json.loads(result.artifacts.get("timing", "{}"))
    except ValueError:
        timing = {}
    return {
        "task": program.task,
        "index": program.index,
        "knobs": program.knobs,
        "correct": result.correct,
        "wall_s": round(result.wall_s, 2),
        "phases": {k: round(v, 3) for k, v in _phases(result).items()},
        "timing": timing,
        # per scenario: the candidate's and the fastest baseline's median device time (us)
        "median_us": {
            s.name: [
                round(s.candidate.median_us, 2),
                round(s.baselines[s.baseline].median_us, 2) if s.baseline in s.baselines else None,
            ]
            for s in result.scenarios
        },
    }


def format_table(doc: dict[str, Any]) -> str:
    """A short table: one row per task and the total."""
    where = doc["hardware"] or doc["device"]
    lines = [
        f"bench eval on {where}: {doc['workers']} evaluations in flight, "
        f"{doc['options']['reps']} timed rounds, profile {doc['options']['profile']}, "
        f"cascade {doc['options']['cascade'] or 'off'}",
        f"{'task':<22}{'evals':>6}{'left':>5}{'evals/min':>10}{'eval s':>8}{'startup':>8}"
        f"{'load':>6}{'check':>7}{'timing':>7}{'wait':>6}{'held':>6}{'rounds':>7}{'swait':>6}"
        f"{'sheld':>6}{'refwait':>8}{'false rej':>10}{'screened':>9}",
    ]
    rows = [*doc["tasks"].items(), ("total", doc["total"])]
    for name, t in rows:
        ph = t["phases_s"]
        lines.append(
            f"{name:<22}{t['evaluations']:>6}{t['not_started']:>5}{t['evals_per_min']:>10.1f}"
            f"{t['eval_wall_s']:>8.1f}{ph['startup']:>8.2f}{ph['load']:>6.2f}"
            f"{ph['correctness']:>7.2f}{ph['timing']:>7.2f}{ph['timing_wait']:>6.2f}"
            f"{ph['timing_held']:>6.2f}{ph.get('timing_rounds', 0.0):>7.2f}"
            f"{ph.get('shared_wait', 0.0):>6.2f}"
            f"{ph.get('shared_held', 0.0):>6.2f}{ph.get('reference_wait', 0.0):>8.2f}"
            f"{t['false_rejections']:>10}{t['screened']:>9}"
        )
    for r in doc["total"]["rejected"]:
        lines.append(
            f"  rejected: {r['task']} #{r['index']} {r['knobs']}: {'; '.join(r['reasons'])}"
        )
    return "\n".join(lines)


def write(doc: dict[str, Any], path: Path) -> None:
    """Write `doc` to `path` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)
