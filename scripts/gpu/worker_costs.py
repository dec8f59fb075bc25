"""Where a worker's time goes (diagnostic): `python3 scripts/gpu/worker_costs.py`.

1. Start-up: a few pool workers started one after another (`pool.start`), each step timed:
   spawn + sandbox + imports (`Init`), the device part (`Warm`, which holds the shared lock).
2. The device part's pieces, in a fresh process without the sandbox: CUDA context, the warm-up
   Triton kernel, the baselines, the first profiler session, the spin rate.
3. The exclusive timed hold: runs the worker side of the timed phase
   (`worker.timing.TimedScenario`) in this process, with each task's seed as the candidate
   (and `--programs N` settings of its knob space after it) and the default schedule, one
   public scenario at a time, the second of two runs (`--profile`: under cProfile, which
   inflates the host times). `--workers 0` skips parts 1 and 2.
Per scenario: wall seconds of `run()`, the timed calls it made, wall per call, the longest
spin, and per implementation its median event time and enqueue time. Then the cProfile of all
scenarios together (top functions by own time), so the per-call overhead is named.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from evokernel.bench.eval_bench import programs_for
from evokernel.evaluate.options import EvalOptions
from evokernel.evaluate.plan import public_scenarios, timing_plan
from evokernel.evaluate.worker.calls import Caller
from evokernel.evaluate.worker.guards import Guards
from evokernel.evaluate.worker.timing import TimedScenario, spin_cycles_per_us
from evokernel.tasks import get_task

_SOURCES = tempfile.TemporaryDirectory(prefix="worker_costs-")  # removed at exit


def load_program(task, code: str, label: str):  # type: ignore[no-untyped-def]
    """The entry point of `code` (the seed or one knob setting of it), imported from a file so
    Triton can read its source."""
    path = Path(_SOURCES.name) / f"{label}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(label, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return getattr(module, task.entry_point)


def programs(task, count: int) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(label, code): the seed, then `count` settings of its knob space, evenly spaced."""
    found = [("seed", task.seed_candidate.read_text())]
    if count:
        found += [(f"knobs{p.index}", p.code) for p in programs_for(task.name, count)]
    return found


WARM_PIECES = r"""
import time
t = time.perf_counter()
marks = []
def mark(name):
    global t
    now = time.perf_counter()
    marks.append(f"{name} {now - t:.3f}")
    t = now
import torch
mark("import torch")
import triton
from evokernel.tasks import get_task
from evokernel.evaluate.worker import calls, guards, timing, warmup
mark("import triton+evokernel")
task = get_task(TASK)
mark("task")
torch.cuda.init(); torch.cuda.set_device(0); torch.empty(1, device="cuda")
mark("cuda context")
x = torch.zeros(100, device="cuda")
warmup._add_one[(1,)](x, 100, BLOCK=128); torch.cuda.synchronize()
mark("triton kernel")
torch.randn(1 << 22).sum()
mark("cpu thread pool")
scenario = task.scenarios("cuda")[0]
inputs = task.make_inputs(scenario, 0, task.dtypes["cuda"][0], "cuda"); torch.cuda.synchronize()
mark("make_inputs")
for fn in task.baselines(scenario).values():
    fn(**inputs)
torch.cuda.synchronize()
mark("baselines")
acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=acts):
    x.add_(1.0); torch.cuda.synchronize()
mark("profiler session")
timing.spin_cycles_per_us()
mark("spin rate")
g = guards.Guards(True); g.install(); g.snapshot([])
mark("guards")
print("  " + ", ".join(marks))
"""


def startup(task_name: str, count: int) -> None:
    import subprocess

    from evokernel.evaluate.api import worker_threads
    from evokernel.evaluate.locks import slot
    from evokernel.evaluate.options import EvalOptions
    from evokernel.evaluate.process import pool
    from evokernel.evaluate.process.launch import WorkerProcess

    took: list[str] = []
    request = WorkerProcess.request

    def timed_request(self, msg, *args, **kwargs):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            return request(self, msg, *args, **kwargs)
        finally:
            took.append(f"{type(msg).__name__} {time.perf_counter() - t0:.2f} s")

    WorkerProcess.request = timed_request  # type: ignore[method-assign]

    task = get_task(task_name)
    opts = EvalOptions().resolved("cuda")
    spec = pool.Spec(
        mode="eval", task=task.name, device="cuda", dtype=str(task.dtypes["cuda"][0]),
        device_memory_mb=opts.device_memory_mb, threads=worker_threads("cuda"),
        memory_mb=opts.memory_mb, disk_mb=opts.disk_mb, cuda_visible=slot("cuda").visible,
        startup_timeout_s=opts.startup_timeout_s,
    )  # fmt: skip
    for i in range(count):
        took.clear()
        t0 = time.perf_counter()
        worker = pool.start(spec)
        total = time.perf_counter() - t0
        worker.process.close()
        print(f"{task_name} worker {i}: ready in {total:.2f} s ({', '.join(took)})", flush=True)
    WorkerProcess.request = request  # type: ignore[method-assign]
    print(f"{task_name}: the device part's pieces in a fresh unsandboxed process:")
    code = WARM_PIECES.replace("TASK", repr(task_name))
    subprocess.run([sys.executable, "-c", code], check=False)


def time_program(task, label, code, device, opts, caller, rate, l2, args, profiler):  # type: ignore[no-untyped-def]
    """Every public scenario's timed phase for one program: wall, calls, and per
    implementation its median event time and enqueue time (us)."""
    cuda = device == "cuda"
    fns = {"candidate": load_program(task, code, f"{task.name}_{label}")}
    total = 0.0
    for scenario in public_scenarios(task, device, opts):
        plan = timing_plan(task, scenario, device, opts, 3, l2, True)
        base = {f"baseline:{k}": v for k, v in task.baselines(scenario).items()}
        request = plan.request()
        timed = TimedScenario(task, scenario, plan.dtype, {**fns, **base}, caller, request, rate)
        TimedScenario.run(timed)  # warm: compiles, autotune
        timed = TimedScenario(task, scenario, plan.dtype, {**fns, **base}, caller, request, rate)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        if args.profile:
            profiler.enable()
        out = timed.run()
        if args.profile:
            profiler.disable()
        wall = time.perf_counter() - t0
        total += wall
        calls = timed.counter
        per_impl = " ".join(
            f"{impl.split(':')[-1]}={statistics.median(s.event_us):.0f}/"
            f"{statistics.median(s.enqueue_us):.0f}"
            for impl, s in out.series.items()
        )
        print(
            f"{task.name:<21} {label:<8} {scenario.name:<12} {wall * 1e3:7.1f} ms {calls:4d} calls "
            f"{wall / max(calls, 1) * 1e6:7.1f} us/call spin<={out.spin_us:6.1f} "
            f"event/enqueue us: {per_impl} {out.reason or ''}",
            flush=True,
        )
    print(f"{task.name} {label}: timed phase {total:.2f} s over all public scenarios", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", default="decode_linear,gqa_decode_attention")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--workers", type=int, default=3, help="start-ups timed per task")
    parser.add_argument("--profile", action="store_true", help="cProfile the timed phases")
    parser.add_argument(
        "--programs", type=int, default=0, help="also time this many knob settings per task"
    )
    args = parser.parse_args()
    if torch.cuda.is_available() and args.workers:
        for name in args.tasks.split(","):
            startup(name, args.workers)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke test of this script
    cuda = device == "cuda"
    rate = spin_cycles_per_us() if cuda else 0.0
    guards = Guards(cuda)
    caller = Caller(guards, device, 8 * 2**30, None)
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0)) if cuda else 0
    opts = EvalOptions(seed=3).resolved(device)
    profiler = cProfile.Profile()
    print(f"{torch.cuda.get_device_name(0) if cuda else device}, spin rate {rate:.0f} cycles/us")
    for name in args.tasks.split(","):
        task = get_task(name)
        for label, code in programs(task, args.programs):
            time_program(task, label, code, device, opts, caller, rate, l2, args, profiler)
    if args.profile:
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
