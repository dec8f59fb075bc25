"""The worker process.

Started by `sandbox.Worker` in a fresh interpreter and its own session as
`python -m evokernel.evaluate.worker FD CONFINEMENT_JSON`; FD is its end of the private channel.
Its first act is to enter the sandbox (process/confine.py), before torch or any thread exists.
It answers the parent's requests in order and never decides a verdict:

  init       trusted setup (mode "eval" | "calibrate": import torch and Triton, initialise the
             device, warm up, install and snapshot the guards; mode "call": nothing), then
             `ready` with what it found about the device
  load       import the candidate file (only now does candidate code run), find the entry point
  check      one correctness job (see wcalls.check_job); raw outputs go back to the parent
  time       one scenario's timed phase (see wtiming); raw per-call figures go back
  profile    CUDA profiler pass over a few candidate calls (see wprofile)
  calibrate  copy bandwidth (clean calibration workers only, which never load a candidate)
  call       run_isolated: import a file, call a function with JSON arguments, return JSON
  exit

A CUDA error ends the worker (`fatal`): its context is unusable. A bug in the harness itself
answers `error` (the parent reports `infrastructure`). Before anything else, the worker asks
the kernel to kill it if the parent dies, and to adopt its orphaned descendants (child
subreaper) so that the parent can find and kill them.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import signal
import sys
import traceback
import warnings
from typing import Any

from evokernel.evaluate import channel

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl_setup() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


SANDBOX: list[str] = []  # the layers confine.enter applied to this process


class Session:
    """The worker's state between requests."""

    def __init__(self, msg: dict[str, Any]) -> None:
        self.mode: str = msg["mode"]
        self.device: str = msg.get("device", "cpu")
        self.module: Any = None
        self.entry: Any = None
        self.path: str | None = None
        self.hidden: dict[int, dict[str, Any]] = {}
        self.prepared: tuple[str, Any] | None = None  # (scenario, TimedScenario) built early
        if self.mode == "call":
            return
        import torch

        from evokernel.evaluate.guards import Guards
        from evokernel.evaluate.warmup import warm_up
        from evokernel.evaluate.wcalls import Caller, poisoned
        from evokernel.tasks import get_task

        warnings.filterwarnings("ignore")
        torch.set_num_threads(int(msg.get("threads", 1)))
        self.task = get_task(msg["task"])
        self.cuda = self.device == "cuda"
        self.dtype = channel.dtype_of(msg["dtype"])
        if self.cuda:
            torch.cuda.init()
            torch.cuda.set_device(0)
        warm_up(self.task, self.device, self.dtype)
        with poisoned():
            torch.empty(1)
        self.spin_rate = 0.0
        if self.cuda:
            from evokernel.evaluate.wtiming import spin_cycles_per_us

            self.spin_rate = spin_cycles_per_us()
        self.guards = Guards(self.cuda)
        self.guards.install()
        self.caller = Caller(self.guards, self.device, int(msg["device_memory_mb"]) * 2**20, None)
        own = [m for name, m in sys.modules.items() if name.startswith("evokernel.") and m]
        self.guards.snapshot(own)

    def device_info(self) -> dict[str, Any]:
        import torch
        import triton

        info: dict[str, Any] = {"torch": torch.__version__, "triton": triton.__version__}
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            info.update(
                kind="cuda",
                name=props.name,
                sm_count=props.multi_processor_count,
                l2_bytes=int(getattr(props, "L2_cache_size", 0)),
                total_memory=props.total_memory,
            )
        else:
            import platform

            info.update(kind="cpu", name=platform.processor() or platform.machine())
        return info

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
    def load(self, msg: dict[str, Any]) -> dict[str, Any]:
        from evokernel.evaluate.result import reason, reason_code
        from evokernel.evaluate.wcalls import classify

        path, entry = msg["path"], msg["entry"]
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
            fn = getattr(module, entry, None)
            if not callable(fn):
                line = reason("load", f"the candidate defines no callable {entry!r}")
            else:
                self.module, self.entry = module, fn
        return {"op": "loaded", "reason": line, "problems": problems}

    def check(self, msg: dict[str, Any]) -> dict[str, Any]:
        from evokernel.evaluate.wcalls import check_job, to_device

        scenario = self.scenario(msg["scenario"], msg.get("hidden_seed"))
        dtype = channel.dtype_of(msg["dtype"])
        inputs = to_device(self.task.make_inputs(scenario, msg["seed"], dtype), self.device)
        perturb = None
        if msg.get("perturb_seed") is not None:
            seed = msg["perturb_seed"]
            perturb = lambda x: self.task.perturb(x, seed)
        self.caller.limit_device_memory()
        records = check_job(self.caller, self.entry, inputs, perturb, bool(msg.get("repeat", True)))
        return {"op": "checked", "records": records, "problems": self.guards.problems()}

    def _timed_scenario(self, msg: dict[str, Any]) -> Any:
        from evokernel.evaluate.wtiming import TimedScenario

        scenario = self.scenario(msg["scenario"], None)
        dtype = channel.dtype_of(msg["dtype"])
        fns = {f"baseline:{k}": v for k, v in self.task.baselines(scenario).items()}
        if self.entry is not None:
            fns["candidate"] = self.entry
        return TimedScenario(self.task, scenario, dtype, fns, self.caller, msg, self.spin_rate)

    def prepare(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Build one scenario's timing inputs (CPU generation, copies on the device) before the
        exclusive timed phase, so the device is held only while calls are timed."""
        self.prepared = (msg["scenario"], self._timed_scenario(msg))
        return {"op": "prepared", "problems": self.guards.problems()}

    def time(self, msg: dict[str, Any]) -> dict[str, Any]:
        prepared, self.prepared = self.prepared, None
        if prepared is not None and prepared[0] == msg["scenario"]:
            timed = prepared[1]
        else:
            timed = self._timed_scenario(msg)
        del prepared
        threads = self.guards.os_threads()  # after building inputs (CPU thread pools start)
        self.caller.limit_device_memory()
        result = timed.run()
        del timed
        problems = self.guards.problems()
        if self.entry is not None:
            problems += self.guards.os_thread_growth(threads, "during timed calls")
        result.update(op="timed", problems=problems)
        return result

    def profile(self, msg: dict[str, Any]) -> dict[str, Any]:
        from evokernel.evaluate.wcalls import to_device
        from evokernel.evaluate.wprofile import profile_calls

        scenario = self.scenario(msg["scenario"], None)
        dtype = channel.dtype_of(msg["dtype"])
        inputs = to_device(self.task.make_inputs(scenario, msg["seed"], dtype), self.device)
        workdir = os.environ.get("TMPDIR", ".")
        result = profile_calls(self.caller, self.entry, inputs, int(msg["calls"]), workdir)
        result.update(op="profiled", problems=self.guards.problems())
        return result

    def calibrate(self, msg: dict[str, Any]) -> dict[str, Any]:
        from evokernel.evaluate.wtiming import copy_bandwidth_gbps

        gbps = copy_bandwidth_gbps() if self.cuda else 0.0
        return {"op": "calibrated", "copy_gbps": gbps, "problems": self.guards.problems()}

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        spec = importlib.util.spec_from_file_location("evokernel_isolated", msg["path"])
        if spec is None or spec.loader is None:
            return {"op": "called", "error": f"cannot import {msg['path']}"}
        module = importlib.util.module_from_spec(spec)
        sys.modules["evokernel_isolated"] = module
        try:
            spec.loader.exec_module(module)
            fn = getattr(module, msg["function"])
            value = fn(*msg.get("args", []), **msg.get("kwargs", {}))
        except BaseException as err:
            if isinstance(err, KeyboardInterrupt):
                raise
            tail = traceback.format_exception(type(err), err, err.__traceback__)[-3:]
            return {"op": "called", "error": f"{type(err).__name__}: {err}", "traceback": tail}
        return {"op": "called", "value": value}


def _cuda_error(text: str) -> bool:
    from evokernel.evaluate.wcalls import CUDA_ERROR_MARKERS

    return any(m in text for m in CUDA_ERROR_MARKERS)


def _fatal(conn: Any, line: str) -> None:
    channel.send(conn, {"op": "fatal", "reason": line})
    conn.close()
    os._exit(3)


def _serve(conn: Any) -> None:
    init = channel.recv(conn)
    try:
        session = Session(init)
        ready: dict[str, Any] = {"op": "ready", "pid": os.getpid(), "sandbox": SANDBOX}
        if session.mode != "call":
            ready["device"] = session.device_info()
        channel.send(conn, ready)
    except Exception:
        detail = traceback.format_exc()[-3000:]
        channel.send(conn, {"op": "error", "detail": detail, "sandbox": SANDBOX})
        return
    handlers = {
        "load": session.load,
        "check": session.check,
        "prepare": session.prepare,
        "time": session.time,
        "profile": session.profile,
        "calibrate": session.calibrate,
        "call": session.call,
    }
    while True:
        msg = channel.recv(conn)
        op = msg.get("op")
        if op == "exit":
            return
        try:
            reply = handlers[str(op)](msg)
        except channel.FatalError as err:
            _fatal(conn, err.line)
        except Exception as err:
            text = f"{type(err).__name__}: {err}"
            if session.mode != "call" and _cuda_error(text):
                # Surfaced in harness code, caused by the candidate's last call.
                _fatal(conn, f"cuda-error: {text[:300]}; the worker was discarded")
            reply = {"op": "error", "detail": traceback.format_exc()[-3000:]}
        try:
            channel.send(conn, reply)
        except (TypeError, ValueError) as err:  # a value run_isolated cannot send as JSON
            channel.send(conn, {"op": "called", "error": f"result is not JSON: {err}"})


def main(argv: list[str]) -> None:
    parent = os.getppid()
    _prctl_setup()
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(1)
    if len(argv) > 2:  # before anything starts a thread (the relay of a PID namespace stays here)
        from evokernel.evaluate.process.confine import Confinement, enter

        SANDBOX.extend(enter(Confinement.from_json(argv[2])))
    conn = channel.connect(int(argv[1]))
    with contextlib.suppress(EOFError):
        _serve(conn)
    conn.close()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
