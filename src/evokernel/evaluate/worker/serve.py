"""The worker's request loop. Answers the parent's requests in order; never decides a verdict.

  Init       trusted set-up that runs nothing on the device (mode "eval" | "calibrate":
             import torch, Triton and the task; CUDA: the context, compiles and CUPTI's set-up,
             warmup.prepare_device; mode "call": nothing) -> Ready
  Warm       the device part (mode "eval" | "calibrate": warm-up kernels and baselines,
             measure the spin rate, install and snapshot the guards) -> Warmed; the parent
             sends it under the device's shared lock. Before it, on a GPU, one Warm per
             public scenario calls the baselines once on its shapes (per-shape library set-up)
  Load       Loading (acknowledged), then import the candidate file (only now does candidate
             code run) and find the entry point -> Loaded
  Check      one correctness job (calls.check_job); raw outputs -> Checked
  Prepare    build one scenario's timing inputs before the exclusive phase -> Prepared
  Time       one scenario's timed phase (timing.TimedScenario); raw figures -> Timed
  Profile    CUDA profiler pass over a few candidate calls -> Profiled
  Calibrate  copy bandwidth (clean calibration workers only, which never load a candidate)
  Call       run_isolated: import a file, call a function with JSON arguments -> Called
  Exit

A CUDA error ends the worker (`Fatal`): its context is unusable. A bug in the harness itself
answers `Error` (the parent reports `infrastructure`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import traceback
import warnings
from multiprocessing.connection import Connection
from typing import Any

from evokernel.evaluate import protocol as p
from evokernel.evaluate.process import channel

_perf = time.perf_counter  # captured before any candidate code


class Session:
    """The worker's state between requests."""

    def __init__(self, init: p.Init) -> None:
        self.mode = init.mode
        self.device = init.device
        self.module: Any = None
        self.entry: Any = None
        self.path: str | None = None
        self.hidden: dict[int, dict[str, Any]] = {}
        self.prepared: dict[str, Any] = {}  # scenario -> TimedScenario built ahead (Prepare)
        self.warmed = False
        if self.mode == "call":
            return
        import torch

        # Everything `warm` needs is imported here, so that Warm is device work only.
        import evokernel.evaluate.worker.calls
        import evokernel.evaluate.worker.guards
        import evokernel.evaluate.worker.timing  # noqa: F401
        from evokernel.evaluate.worker.warmup import prepare_device
        from evokernel.tasks import get_task

        warnings.filterwarnings("ignore")
        torch.set_num_threads(init.threads)
        self.task = get_task(init.task)
        self.cuda = self.device == "cuda"
        if self.cuda:  # the host-side device set-up, which launches nothing: no lock needed
            prepare_device()
        self.dtype = channel.dtype_of(init.dtype)
        self.device_memory_mb = init.device_memory_mb

    def warm(self, msg: p.Warm) -> p.Warmed:
        if self.mode == "call" or self.warmed:
            raise RuntimeError(f"unexpected Warm (mode {self.mode}, warmed {self.warmed})")
        import torch

        if msg.scenario:  # before the guards exist: trusted library set-up, per shape
            from evokernel.evaluate.worker.warmup import warm_baselines

            warm_baselines(self.task, self.scenario(msg.scenario, None), self.device, self.dtype)
            return p.Warmed()

        from evokernel.evaluate.worker.calls import Caller, poisoned
        from evokernel.evaluate.worker.guards import Guards
        from evokernel.evaluate.worker.timing import spin_cycles_per_us
        from evokernel.evaluate.worker.warmup import warm_up

        warm_up(self.task, self.device, self.dtype)
        with poisoned():
            torch.empty(1)
        self.spin_rate = spin_cycles_per_us() if self.cuda else 0.0
        self.guards = Guards(self.cuda)
        self.guards.install()
        self.caller = Caller(self.guards, self.device, self.device_memory_mb * 2**20, None)
        own = [m for name, m in sys.modules.items() if name.startswith("evokernel.") and m]
        self.guards.snapshot(own)
        self.warmed = True
        return p.Warmed(device=self.device_facts())

    def device_facts(self) -> p.DeviceFacts | None:
        if self.mode == "call":
            return None
        import torch
        import triton

        if not self.cuda:
            import platform

            name = platform.processor() or platform.machine()
            return p.DeviceFacts("cpu", name, torch.__version__, triton.__version__)
        props = torch.cuda.get_device_properties(0)
        return p.DeviceFacts(
            kind="cuda",
            name=props.name,
            torch=torch.__version__,
            triton=triton.__version__,
            sm_count=props.multi_processor_count,
            l2_bytes=int(getattr(props, "L2_cache_size", 0)),
            total_memory=int(props.total_memory),
        )

    # --- scenarios ---------------------------------------------------------------------------
    def scenario(self, name: str, hidden_seed: int | None) -> Any:
        found = {s.name: s for s in self.task.scenarios(self.device)}
        if hidden_seed is not None:
            if hidden_seed not in self.hidden:
                hidden = self.task.hidden_scenarios(self.device, hidden_seed)
                self.hidden[hidden_seed] = {s.name: s for s in hidden}
            found.update(self.hidden[hidden_seed])
        if name not in found:
            raise KeyError(f"unknown scenario {name!r}")
        return found[name]

    # --- requests ----------------------------------------------------------------------------
    def load(self, msg: p.Load) -> p.Loaded:
        from evokernel.evaluate.worker.calls import classify
        from evokernel.reasons import reason, reason_code

        if not self.warmed:
            raise RuntimeError("Load before Warm: the worker's set-up is not finished")
        path = msg.path
        self.path = self.caller.path = path
        threads = self.guards.os_threads()
        spec = importlib.util.spec_from_file_location("evokernel_candidate", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["evokernel_candidate"] = module
        line = None
        try:
            with self.guards.active():
                spec.loader.exec_module(module)
        except BaseException as err:
            if isinstance(err, KeyboardInterrupt):
                raise
            if isinstance(err, SyntaxError) and err.filename == path:
                # Raised by the compiler: the traceback holds only importlib's frames.
                text = (err.text or "").strip()[:100]
                where = f"line {err.lineno} of the candidate" + (f": {text}" if text else "")
                line = reason("load", f"{type(err).__name__} at {where} ({err.msg})")
            else:
                line = classify(err, path)  # a CUDA error at import raises FatalError
            if reason_code(line) == "exception":
                line = reason("load", line.split(": ", 1)[1])
        problems = self.guards.problems() + self.guards.os_thread_growth(
            threads, "during the import"
        )
        if line is None:
            fn = getattr(module, msg.entry, None)
            if not callable(fn):
                line = reason("load", f"the candidate defines no callable {msg.entry!r}")
            else:
                self.module, self.entry = module, fn
        return p.Loaded(reason=line, problems=problems)

    def check(self, msg: p.Check) -> p.Checked:
        from evokernel.evaluate.worker.calls import check_job

        scenario = self.scenario(msg.scenario, msg.hidden_seed)
        dtype = channel.dtype_of(msg.dtype)
        inputs = self.task.make_inputs(scenario, msg.seed, dtype, self.device)
        perturb = None
        if msg.perturb_seed is not None:
            seed = msg.perturb_seed
            perturb = lambda x: self.task.perturb(x, seed)
        self.caller.limit_device_memory()
        records = check_job(self.caller, self.entry, inputs, perturb, msg.repeat, task=self.task)
        return p.Checked(records=records, problems=self.guards.problems())

    def _timed_scenario(self, msg: p.Time) -> Any:
        from evokernel.evaluate.worker.timing import TimedScenario

        scenario = self.scenario(msg.scenario, None)
        dtype = channel.dtype_of(msg.dtype)
        fns = {f"baseline:{k}": v for k, v in self.task.baselines(scenario).items()}
        if self.entry is not None:
            fns["candidate"] = self.entry
        return TimedScenario(self.task, scenario, dtype, fns, self.caller, msg, self.spin_rate)

    def prepare(self, msg: p.Prepare) -> p.Prepared:
        """Build one scenario's timing inputs (CPU generation, copies on the device) before the
        exclusive timed phase, so the device is held only while calls are timed. Several may
        wait at once (a batch of scenarios is timed in one exclusive hold)."""
        self.prepared[msg.timing.scenario] = self._timed_scenario(msg.timing)
        return p.Prepared(problems=self.guards.problems())

    def time(self, msg: p.Time) -> p.Timed:
        timed = self.prepared.pop(msg.scenario, None) or self._timed_scenario(msg)
        threads = self.guards.os_threads()  # after building inputs (CPU thread pools start)
        self.caller.limit_device_memory()
        started = _perf()
        result = timed.run()
        rounds_s = _perf() - started
        del timed
        problems = self.guards.problems()
        if self.entry is not None:
            problems += self.guards.os_thread_growth(threads, "during timed calls")
        return p.Timed(
            problems=problems,
            series=result.series,
            rechecks=result.rechecks,
            spin_us=result.spin_us,
            reason=result.reason,
            implementation=result.implementation,
            rounds_s=rounds_s,
        )

    def profile(self, msg: p.Profile) -> p.Profiled:
        from evokernel.evaluate.worker.profile import profile_calls

        scenario = self.scenario(msg.scenario, None)
        dtype = channel.dtype_of(msg.dtype)
        inputs = self.task.make_inputs(scenario, msg.seed, dtype, self.device)
        workdir = os.environ.get("TMPDIR", ".")
        events, line = profile_calls(self.caller, self.entry, inputs, msg.calls, workdir)
        return p.Profiled(problems=self.guards.problems(), events=events, reason=line)

    def calibrate(self, _msg: p.Calibrate) -> p.Calibrated:
        from evokernel.evaluate.worker.timing import copy_bandwidth_gbps

        gbps = copy_bandwidth_gbps() if self.cuda else 0.0
        return p.Calibrated(copy_gbps=gbps, problems=self.guards.problems())

    def call(self, msg: p.Call) -> p.Called:
        spec = importlib.util.spec_from_file_location("evokernel_isolated", msg.path)
        if spec is None or spec.loader is None:
            return p.Called(error=f"cannot import {msg.path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["evokernel_isolated"] = module
        try:
            spec.loader.exec_module(module)
            fn = getattr(module, msg.function)
            value = fn(*msg.args, **msg.kwargs)
        except BaseException as err:
            if isinstance(err, KeyboardInterrupt):
                raise
            tail = traceback.format_exception(type(err), err, err.__traceback__)[-3:]
            return p.Called(error=f"{type(err).__name__}: {err}", traceback=tail)
        return p.Called(value=value)


def _cuda_error(text: str) -> bool:
    from evokernel.evaluate.worker.calls import CUDA_ERROR_MARKERS

    return any(m in text for m in CUDA_ERROR_MARKERS)


def _fatal(conn: Connection, line: str) -> None:
    p.send(conn, p.Fatal(reason=line))
    conn.close()
    os._exit(3)


def serve(conn: Connection, sandbox: list[str]) -> None:
    """Answer requests until `Exit` (or the parent is gone: EOFError)."""
    init = p.recv(conn, (p.Init,))
    try:
        session = Session(init)
        p.send(conn, p.Ready(pid=os.getpid(), sandbox=sandbox))
    except Exception:
        p.send(conn, p.Error(detail=traceback.format_exc()[-3000:], sandbox=sandbox))
        return
    handlers: dict[type[p.Message], Any] = {
        p.Load: session.load,
        p.Check: session.check,
        p.Prepare: session.prepare,
        p.Time: session.time,
        p.Profile: session.profile,
        p.Calibrate: session.calibrate,
        p.Call: session.call,
    }
    while True:
        msg = p.recv(conn, p.REQUESTS)
        if isinstance(msg, p.Exit):
            return
        if isinstance(msg, p.Warm):  # trusted set-up: a failure is the infrastructure's
            try:
                p.send(conn, session.warm(msg))
            except Exception:
                p.send(conn, p.Error(detail=traceback.format_exc()[-3000:], sandbox=sandbox))
                return
            continue
        if isinstance(msg, p.Load):
            p.send(conn, p.Loading())  # from here on, candidate code runs
        reply: p.Message
        try:
            reply = handlers[type(msg)](msg)
        except channel.FatalError as err:
            _fatal(conn, err.line)
        except Exception as err:
            text = f"{type(err).__name__}: {err}"
            if session.mode != "call" and _cuda_error(text):
                # Surfaced in harness code, caused by the candidate's last call.
                _fatal(conn, f"cuda-error: {text[:300]}; the worker was discarded")
            reply = p.Error(detail=traceback.format_exc()[-3000:])
        try:
            p.send(conn, reply)
        except (TypeError, ValueError) as err:  # a value run_isolated cannot send as JSON
            p.send(conn, p.Called(error=f"result is not JSON: {err}"))
