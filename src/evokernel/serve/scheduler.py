"""The engine process: one loop that owns the model, admits requests and runs decode steps.

The HTTP process starts it (`engine_main`, a spawned process) and talks to it over one
duplex pipe in token ids only; this module imports no HTTP code. Messages, all tuples:

  in   ("add", rid, prompt_ids, RowParams, max_tokens, stop_ids)   a new request
       ("cancel", rid)                                               drop it at the next step
       ("stop",)                                                     leave the loop
  out  ("ready", info) | ("error", line)                             once, after start-up
       ("out", events, stats, work)                                  once per loop turn
       ("bye",)                                                      after "stop"

`events` is a list of (rid, token, logprob | None, top | None, finish | None), each request's
tokens in order; `finish` is "stop" (a stop id: EOS unless ignored) or "length" (max_tokens)
on a request's last token. `stats` is (rows of the step launched this turn, running, waiting);
a turn with no events and no step still sends them when running or waiting changed.
`work` is the engine's running accounts, {"clock", "host", "cpu_s", "gc_s"}: the
device time, launches and units of its prefills and decode steps so far (engine/work_clock.py;
a launch counts once it has finished), the host's time in each phase of its loop
(serve/accounts.py `HOST_PHASES`, and "turns": their count; every phase but "idle" is time
with requests running or waiting), its process's CPU time and its time in Python's garbage collector
(serve/gc_clock.py; the heap alive after start-up is frozen), all cumulative since start-up.
The host's "wait" is time blocked on the device (a step's or prefill's tokens): where it is
small beside the turn, the host, not the device, sets the pace; "poll" is reading messages
while busy, "idle" waiting for them with nothing to do.

One turn of the loop:
  1. read messages (blocking only when there is nothing to do);
  2. release the slots of finished, cancelled and fully-issued requests (a request whose
     max_tokens are all launched needs no further step); compact the slots if that lowers
     the batch bucket;
  3. admit waiting requests into free slots, in arrival order, until the turn's prefill
     budget (prompt tokens) is spent, at least one per turn; those of one length bucket are
     prefilled together (engine/batching.py `admit_many`);
  4. launch one decode step for every running request (engine/batching.py);
  5. wait for the previous turn's step and for this turn's first tokens, and send them.
Step 4 comes before the wait of step 5, so the device always has the next step queued while
the host turns tokens into events: the host's work per token hides behind the device's. The
price is one step: a request that ends on an EOS has one more token computed and dropped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from evokernel.engine.batching import PREFILL_ROWS, BatchRunner, PendingTokens, RowParams
from evokernel.serve.accounts import HOST_KEYS
from evokernel.serve.gc_clock import GcClock, settle

IDLE_POLL_S = 0.5  # how often an idle engine checks that its parent is alive


@dataclass(frozen=True)
class EngineSettings:
    model_dir: str
    device: str | None = None
    dtype: str | None = None
    ops: str | None = None
    kernels: str | None = None
    pdl: bool | None = None
    max_batch: int = 32
    max_len: int = 4096
    prefill_budget: int = 8192  # prompt tokens a turn admits (and the staging area holds)
    use_graph: bool | None = None
    rows_per_call: int | None = None
    prefill_rows: int = PREFILL_ROWS
    seed: int = 0


@dataclass
class _Request:
    rid: int
    ids: list[int]
    params: RowParams
    max_tokens: int
    stop_ids: frozenset[int]
    issued: int = 0  # tokens launched: the first (prefill) plus one per step
    produced: int = 0  # tokens delivered
    done: bool = False  # finished or cancelled: its further tokens are dropped


@dataclass
class _Pending:
    tokens: PendingTokens
    owners: dict[int, _Request]  # slot -> request at launch time


@dataclass
class Scheduler:
    runner: BatchRunner
    prefill_budget: int
    waiting: deque[_Request] = field(default_factory=deque)
    running: dict[int, _Request] = field(default_factory=dict)  # slot -> request
    by_rid: dict[int, _Request] = field(default_factory=dict)
    steps: deque[_Pending] = field(default_factory=deque)
    host: dict[str, float] = field(default_factory=lambda: dict.fromkeys(HOST_KEYS, 0.0))

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running or self.steps)

    def add(self, rid: int, ids: list[int], params: RowParams, max_tokens: int, stop) -> None:
        req = _Request(rid, ids, params, max_tokens, frozenset(stop))
        self.by_rid[rid] = req
        self.waiting.append(req)

    def cancel(self, rid: int) -> None:
        req = self.by_rid.pop(rid, None)
        if req is not None:
            req.done = True

    def turn(self) -> tuple[list[tuple[Any, ...]], tuple[int, int, int]]:
        """Steps 2-5 of the module doc; returns the events and stats to send."""
        runner, host, clock = self.runner, self.host, time.perf_counter
        t0 = clock()
        for slot, req in list(self.running.items()):
            if req.done or req.issued >= req.max_tokens:
                runner.release(slot)
                del self.running[slot]
        for src, dst in runner.compact().items():
            self.running[dst] = self.running.pop(src)
        t1 = clock()
        firsts = self._admit()
        t2 = clock()
        rows = 0
        launched = runner.step() if self.running else None
        if launched is not None:
            rows = len(launched.slots)
            for slot in launched.slots:
                self.running[slot].issued += 1
            self.steps.append(_Pending(launched, dict(self.running)))
        t3 = clock()
        events: list[tuple[Any, ...]] = []
        waited = 0.0
        while len(self.steps) > (1 if launched is not None else 0):
            waited += self._deliver(self.steps.popleft(), events)
        for pending in firsts:
            waited += self._deliver(pending, events)
        runner.clock.collect()
        self.waiting = deque(r for r in self.waiting if not r.done)
        t4 = clock()
        for phase, spent in zip(
            ("release", "admit", "launch", "wait", "deliver"),
            (t1 - t0, t2 - t1, t3 - t2, waited, t4 - t3 - waited),
        ):
            host[phase] += spent
        host["turns"] += 1
        return events, (rows, len(self.running), len(self.waiting))

    def _admit(self) -> list[_Pending]:
        picked: list[_Request] = []
        spent = 0
        while self.waiting and len(picked) < self.runner.free:
            req = self.waiting[0]
            if req.done:
                self.waiting.popleft()
                continue
            if spent and spent + len(req.ids) > self.prefill_budget:
                break
            self.waiting.popleft()
            picked.append(req)
            spent += len(req.ids)
        if not picked:
            return []
        slots, pendings = self.runner.admit_many([(r.ids, r.params) for r in picked])
        for slot, req in zip(slots, picked):
            req.issued = 1
            self.running[slot] = req
        return [_Pending(p, {s: self.running[s] for s in p.slots}) for p in pendings]

    def _deliver(self, pending: _Pending, events: list[tuple[Any, ...]]) -> float:
        """Append `pending`'s events; returns the seconds spent waiting for its tokens."""
        t0 = time.perf_counter()
        out = pending.tokens.wait()
        waited = time.perf_counter() - t0
        for i, slot in enumerate(pending.tokens.slots):
            req = pending.owners[slot]
            if req.done:
                continue
            token = out.tokens[i]
            req.produced += 1
            finish = None
            if token in req.stop_ids:
                finish = "stop"
            elif req.produced >= req.max_tokens:
                finish = "length"
            if finish is not None:
                req.done = True
                self.by_rid.pop(req.rid, None)
            events.append((req.rid, token, out.logprobs[i], out.top[i], finish))
        return waited


def engine_main(conn: Connection, settings: EngineSettings) -> None:
    """The engine process's entry point (multiprocessing, spawn)."""
    _detach_from_terminal_signals()
    try:
        scheduler, info = _start(settings)
    except Exception as err:  # reported to the parent as one line, then exit
        from evokernel.errors import EvokernelError

        line = str(err) if isinstance(err, EvokernelError) else _crash_line(err)
        conn.send(("error", line))
        conn.close()
        return
    settle()  # the model, graphs and buffers alive for the process's life: never walked again
    conn.send(("ready", info))
    with contextlib.suppress(EOFError, BrokenPipeError, ConnectionResetError):
        _loop(conn, scheduler)  # those errors: the parent went away, nothing left to serve


def _start(settings: EngineSettings) -> tuple[Scheduler, dict[str, Any]]:
    import torch

    from evokernel.engine.loading import load_engine

    t0 = time.perf_counter()
    model = load_engine(
        settings.model_dir,
        settings.device,
        settings.dtype,
        settings.ops or ("triton" if _cuda(settings.device) else "torch"),
        max_seq_len=settings.max_len,
        pdl=settings.pdl,
        kernels=settings.kernels,
    )
    runner = BatchRunner(
        model,
        settings.max_batch,
        settings.max_len,
        use_graph=settings.use_graph,
        rows_per_call=settings.rows_per_call,
        seed=settings.seed,
        prefill_rows=settings.prefill_rows,
        prefill_tokens=settings.prefill_budget,
    )
    dev = model.device
    info = {
        "device": dev.type,
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "dtype": str(model.dtype).removeprefix("torch."),
        "ops": dict(model.ops.origin),
        "max_batch": runner.max_batch,
        "max_len": runner.max_len,
        "batch_buckets": runner.batch_sizes,
        "context_buckets": runner.bounds,
        "rows_per_call": runner.rows_per_call,
        "prefill_shapes": runner.prefill_shapes,
        "cuda_graphs": runner.graph_count,
        "kv_bytes": runner.plan.cache_bytes,
        "eos_token_ids": list(model.cfg.eos_token_ids),
        "vocab_size": model.cfg.vocab_size,
        "start_s": time.perf_counter() - t0,
    }
    return Scheduler(runner, settings.prefill_budget), info


def _loop(conn: Connection, scheduler: Scheduler) -> None:
    import torch

    last: tuple[int, int] = (0, 0)  # (running, waiting) last sent
    host, gc_clock = scheduler.host, GcClock()
    with torch.inference_mode():
        while True:
            top = time.perf_counter()
            was_busy = scheduler.busy
            timeout = 0.0 if was_busy else IDLE_POLL_S
            while conn.poll(timeout):
                msg = conn.recv()
                kind = msg[0]
                if kind == "add":
                    scheduler.add(*msg[1:])
                elif kind == "cancel":
                    scheduler.cancel(msg[1])
                elif kind == "stop":
                    conn.send(("bye",))
                    return
                timeout = 0.0
            if os.getppid() == 1:
                return  # orphaned (the parent died without a word)
            host["poll" if was_busy else "idle"] += time.perf_counter() - top
            if not scheduler.busy:
                continue
            events, stats = scheduler.turn()
            sending = time.perf_counter()
            if events or stats[0] or stats[1:] != last:
                work = {
                    "clock": scheduler.runner.clock.snapshot(),
                    "host": dict(host),
                    "cpu_s": time.process_time(),
                    "gc_s": gc_clock.seconds,
                }
                conn.send(("out", events, stats, work))
                last = stats[1:]
            host["send"] += time.perf_counter() - sending


def _cuda(device: str | None) -> bool:
    from evokernel import device as devices

    return devices.resolve(device) == "cuda"


def _detach_from_terminal_signals() -> None:
    # Ctrl-C reaches the whole process group: the HTTP process shuts down gracefully and
    # stops this one; this one must not die first. If the parent is killed outright, the
    # kernel kills this process too (Linux), so no engine is left holding the GPU.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _crash_line(err: BaseException) -> str:
    tb = traceback.extract_tb(err.__traceback__)
    where = f" at {tb[-1].filename}:{tb[-1].lineno}" if tb else ""
    return f"the engine failed to start: {type(err).__name__}: {err}{where}"
