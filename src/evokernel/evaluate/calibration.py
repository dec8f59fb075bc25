"""The clean calibration worker: a worker that never imports a candidate.

Per (task, GPU, scenario set) and evaluator process, once: the device's measured copy
bandwidth (the roofline's denominator) and the baselines' median times with the same
schedule and inputs rotation as a candidate's timed phase. A candidate process whose baseline
runs much slower than here gets its scenario flagged (`baseline-slowdown`). The clean worker
also runs the guards, so a harness false positive shows up here as `problems` without any
candidate involved. A calibration that fails is recorded (`error`), never blamed on a
candidate: its figures are then simply absent (roofline 0).

CPU evaluations need no calibration (no speed claims are made there).
"""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from evokernel.evaluate import protocol as p
from evokernel.evaluate.locks import DeviceSlot
from evokernel.evaluate.options import EvalOptions
from evokernel.evaluate.plan import public_scenarios, timing_plan, warm_scenarios
from evokernel.evaluate.process.launch import WorkerGone, WorkerProcess
from evokernel.evaluate.process.pool import Spec, StartFailed, start
from evokernel.evaluate.stats import median
from evokernel.reasons import reason
from evokernel.tasks.base import Task

CALIBRATION_SEED = 7


@dataclass
class Calibration:
    copy_gbps: float = 0.0
    baselines: dict[str, dict[str, float]] = field(default_factory=dict)  # scenario -> name -> us
    driver: str = ""
    clocks: str = ""
    problems: list[str] = field(default_factory=list)
    error: str = ""
    wall_s: float = 0.0


def nvidia_smi(visible: str | None) -> tuple[str, str]:
    """(driver version, "sm MHz / mem MHz" now) of the GPU, or empty strings."""
    query = "--query-gpu=driver_version,clocks.sm,clocks.mem"
    cmd = ["nvidia-smi", query, "--format=csv,noheader,nounits"]
    if visible is not None:
        cmd += ["-i", visible]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return "", ""
    fields = (
        [f.strip() for f in out.stdout.strip().splitlines()[0].split(",")] if out.stdout else []
    )
    if len(fields) < 3:
        return "", ""
    return fields[0], f"sm {fields[1]} MHz, mem {fields[2]} MHz at start"


def calibration_spec(task: Task, options: EvalOptions, slot: DeviceSlot) -> Spec:
    return Spec(
        mode="calibrate",
        task=task.name,
        device="cuda",
        dtype=str(task.dtypes["cuda"][0]),
        device_memory_mb=options.device_memory_mb,
        threads=4,
        memory_mb=max(options.memory_mb, 16384),
        disk_mb=options.disk_mb,
        cuda_visible=slot.visible,
        startup_timeout_s=options.startup_timeout_s,
        warm_scenarios=warm_scenarios(task, "cuda", options),
    )


def calibrate(task: Task, options: EvalOptions, slot: DeviceSlot) -> Calibration:
    """Never raises: a failure is recorded in `Calibration.error`."""
    began = time.monotonic()
    cal = Calibration()
    cal.driver, cal.clocks = nvidia_smi(slot.visible)
    try:
        warm = start(calibration_spec(task, options, slot))  # a fresh worker, never pooled
    except (StartFailed, OSError) as err:
        cal.error = f"cannot start the calibration worker: {err}"
        cal.wall_s = time.monotonic() - began
        return cal
    try:
        _run(warm.process, warm.facts, task, options, slot, cal)
    except WorkerGone as gone:
        cal.error = gone.line
    except Exception as err:  # a calibration failure must not fail a candidate
        cal.error = f"{type(err).__name__}: {err}"
    finally:
        with slot.shared():  # its CUDA context's teardown: not during a timed phase
            warm.process.close()
        cal.wall_s = time.monotonic() - began
    return cal


def _run(
    worker: WorkerProcess,
    facts: p.DeviceFacts | None,
    task: Task,
    options: EvalOptions,
    slot: DeviceSlot,
    cal: Calibration,
) -> None:
    worker.set_deadline(300.0, reason("infrastructure", "calibration timed out"))
    l2 = facts.l2_bytes if facts is not None else 0
    with slot.exclusive():
        measured = worker.request(p.Calibrate(), (p.Calibrated, p.Error))
    if isinstance(measured, p.Error):
        cal.error = measured.detail[-500:]
        return
    cal.copy_gbps = measured.copy_gbps
    cal.problems += measured.problems
    for scenario in public_scenarios(task, "cuda", options):
        plan = timing_plan(task, scenario, "cuda", options, CALIBRATION_SEED, l2, False)
        with slot.exclusive():
            timed = worker.request(plan.request(), (p.Timed, p.Fatal, p.Error))
        if not isinstance(timed, p.Timed) or timed.reason or not timed.series:
            detail = getattr(timed, "reason", None) or getattr(timed, "detail", "") or "no series"
            cal.error = str(detail)[-500:]
            return
        cal.problems += timed.problems
        cal.baselines[scenario.name] = {
            k.removeprefix("baseline:"): median(v.event_us) for k, v in timed.series.items()
        }


_CACHE: dict[tuple[object, ...], Future[Calibration]] = {}
_LOCK = threading.Lock()
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="evokernel-calibration")


def calibration_for(task: Task, options: EvalOptions, slot: DeviceSlot) -> Future[Calibration]:
    """The (possibly still running) calibration of this task's scenarios on this GPU; a
    finished one that failed is started again."""
    key = (task.name, slot.visible, options.scenarios, options.reps, options.warmup)
    with _LOCK:
        known = _CACHE.get(key)
        failed = known is not None and known.done() and bool(known.result().error)
        if known is None or failed:
            _CACHE[key] = _POOL.submit(calibrate, task, options, slot)
        return _CACHE[key]
