"""The evaluator's entry points: `evaluate` and `evaluate_many`.

Only bad arguments raise (an unknown task or scenario, a missing or oversized candidate file,
bad options: `EvokernelError` subclasses), and a machine without the OS sandbox unless
`EvalOptions.allow_unsandboxed` (see `isolation_status()`). Everything a candidate does ends
as an `EvalResult` with `correct=False` and reason lines.

Flow per candidate: the source gate (size, encoding; always) and the static pre-check
(optional; both without a process) -> `session.CandidateRun` (fresh worker: load,
correctness, timing) -> statistics against the clean calibration (CUDA, timed runs only; one
calibration per task and GPU, shared by every candidate of this process and started
concurrently with the first candidate's correctness phase).

`evaluate_many` runs up to `workers` candidates at once (default `default_workers`: sized to
the machine's cores). Their correctness phases overlap; a timed phase holds its GPU
exclusively (locks.DeviceSlot). With several visible GPUs, candidates are spread over them
round-robin. With `budget_s`, candidates not started when the budget runs out are returned
unevaluated (reason `budget`); those already running finish. Concurrent `evaluate` calls from
several threads (the search's workers) share the same locks, the warm pool and the calibration.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evokernel import device as devices
from evokernel.errors import TaskError
from evokernel.evaluate.calibration import calibration_for
from evokernel.evaluate.cascade import screen_scenarios
from evokernel.evaluate.locks import DeviceSlot, slot, slot_count
from evokernel.evaluate.options import EvalOptions
from evokernel.evaluate.plan import public_scenarios
from evokernel.evaluate.process.launch import abort_all
from evokernel.evaluate.process.policy import require_isolation
from evokernel.evaluate.result import EvalResult
from evokernel.evaluate.session import CPU_LABEL, CUDA_LABEL, CandidateRun
from evokernel.evaluate.static import MAX_SOURCE_BYTES, check_source, source_problems
from evokernel.reasons import reason
from evokernel.tasks import get_task
from evokernel.tasks.base import Task

Candidate = str | Path


def read_candidate(candidate: Candidate) -> tuple[str, str]:
    """(source, label): a Path or a one-line string is a file; other strings are source."""
    if isinstance(candidate, str) and ("\n" in candidate or not candidate.strip()):
        raw = candidate.encode("utf-8", "surrogatepass")  # a lone surrogate is _one's to reject
        digest = hashlib.sha256(raw).hexdigest()[:16]
        return candidate, f"sha256:{digest}"
    path = Path(candidate)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise TaskError(f"candidate file not found: {path}") from None
    except OSError as err:
        raise TaskError(f"cannot read candidate {path}: {err.strerror}") from None
    if not stat.S_ISREG(info.st_mode):  # never opened: a FIFO would block the evaluator
        raise TaskError(f"candidate {path} is {_file_kind(info.st_mode)}, not a regular file")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SOURCE_BYTES + 1)  # never read whole: it could be any size
        if len(data) > MAX_SOURCE_BYTES:
            size = max(info.st_size, len(data))
            limit = MAX_SOURCE_BYTES >> 10
            raise TaskError(f"candidate {path} is {size} bytes; the limit is {limit} KiB")
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as text mode
        return text, str(path)
    except (OSError, UnicodeDecodeError) as err:
        raise TaskError(f"cannot read candidate {path}: {err}") from None


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a regular file")


PER_GPU_MAX = 8


def default_workers(device: str) -> int:
    """Evaluations in flight that use this machine: on CUDA, per visible GPU, half the cores
    shared among the GPUs (1 to `PER_GPU_MAX` per GPU; compiles and checks are CPU work that
    overlaps, timed phases take turns); on the CPU 1 (the interpreter is the bottleneck)."""
    if device != "cuda":
        return 1
    gpus = slot_count("cuda")
    per_gpu = max(1, min(PER_GPU_MAX, (os.cpu_count() or 2) // 2 // gpus))
    return per_gpu * gpus


def worker_threads(device: str, workers: int | None = None) -> int:
    """Intra-op threads of one worker when `workers` (default: `default_workers`) run at once."""
    return max(1, (os.cpu_count() or 1) // (workers or default_workers(device)))


def _task(task: str | Task) -> Task:
    return get_task(task) if isinstance(task, str) else get_task(task.name)


def _static_result(
    task: Task, label: str, device: str, lines: list[str], start: float
) -> EvalResult:
    return EvalResult(
        task=task.name,
        candidate=label,
        correct=False,
        reasons=lines,
        stage="static",
        device=None,
        timing_label=CUDA_LABEL if device == "cuda" else CPU_LABEL,
        wall_s=time.monotonic() - start,
    )


def _one(
    task: Task,
    source: str,
    label: str,
    device: str,
    options: EvalOptions,
    device_slot: DeviceSlot,
    threads: int,
) -> EvalResult:
    start = time.monotonic()
    lines = source_problems(source)  # with the pre-check off too: later stages parse it
    if not lines and options.static_check:
        lines = check_source(source)
    if lines:
        return _static_result(task, label, device, lines, start)
    seed = (
        options.seed if options.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
    )
    calibration = None
    if device == "cuda" and options.time:
        future = calibration_for(task, options, device_slot)
        calibration = future.result
    run = CandidateRun(
        task, source, label, device, options, seed, device_slot, calibration, threads
    )
    result = run.run()
    result.artifacts["seed"] = str(seed)
    result.wall_s = time.monotonic() - start
    return result


def check_arguments(
    task: str | Task, device: str | None, options: EvalOptions | None
) -> tuple[Task, str, EvalOptions]:
    """(task, device, resolved options); raises for a bad argument (unknown task, device or
    scenario). Does not look at the sandbox."""
    the_task = _task(task)
    dev = devices.resolve(device)
    opts = (options or EvalOptions()).resolved(dev)
    if dev not in the_task.dtypes:
        raise TaskError(f"task {the_task.name} has no dtypes for device {dev}")
    public = public_scenarios(the_task, dev, opts)  # an unknown scenario name is a bad argument
    if opts.cascade is not None:
        screen_scenarios(opts.cascade, public)  # so is a screen scenario not among them
    return the_task, dev, opts


def _prepare(
    task: str | Task, device: str | None, options: EvalOptions | None
) -> tuple[Task, str, EvalOptions]:
    the_task, dev, opts = check_arguments(task, device, options)
    require_isolation(opts.allow_unsandboxed)
    return the_task, dev, opts


def evaluate(
    task: str | Task,
    candidate: Candidate,
    device: str | None = None,
    options: EvalOptions | None = None,
    gpu: int = 0,
) -> EvalResult:
    """Evaluate one candidate (a file path, or source text) for `task` on `device`
    ("cuda" | "cpu"; None: CUDA when present). `gpu` picks among the visible GPUs (modulo
    their number); concurrent calls from several threads share the device slots and the
    calibration, so their timed phases never overlap on one GPU."""
    the_task, dev, opts = _prepare(task, device, options)
    source, label = read_candidate(candidate)
    # One thread count for every call, so that the pool's workers suit every caller.
    threads = worker_threads(dev)
    return _one(the_task, source, label, dev, opts, slot(dev, gpu), threads)


def evaluate_many(
    task: str | Task,
    candidates: Sequence[Candidate],
    device: str | None = None,
    options: EvalOptions | None = None,
    workers: int | None = None,
    budget_s: float | None = None,
) -> list[EvalResult]:
    """Evaluate several candidates, `workers` at a time (None: `default_workers`); results in
    the input order."""
    the_task, dev, opts = _prepare(task, device, options)
    if workers is None:
        workers = default_workers(dev)
    if workers < 1:
        raise TaskError(f"workers must be >= 1, got {workers}")
    read = [read_candidate(c) for c in candidates]
    deadline = None if budget_s is None else time.monotonic() + budget_s
    slots = slot_count(dev)
    threads = worker_threads(dev, workers)

    def one(index: int) -> EvalResult:
        source, label = read[index]
        if deadline is not None and time.monotonic() > deadline:
            result = _static_result(the_task, label, dev, [], time.monotonic())
            result.stage = "load"
            result.reasons = [reason("budget", f"the batch budget of {budget_s:g} s ran out first")]
            return result
        return _one(the_task, source, label, dev, opts, slot(dev, index % slots), threads)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evokernel-eval") as pool:
        try:
            return list(pool.map(one, range(len(read))))
        except BaseException:  # an interrupt: stop the running workers instead of waiting
            pool.shutdown(wait=False, cancel_futures=True)
            abort_all(reason("infrastructure", "the evaluator was interrupted"))
            raise
