"""Worker side: the timed phase of one scenario, the copy-bandwidth probe, the GPU spin rate.

The parent sends the whole schedule (warm-up and timed rounds, each a random order of the
candidate and the baselines), so it knows which inputs every call saw. Each call:

  1. takes the next input copy (copies rotate so the bytes between two uses of one copy exceed
     the L2 cache several times) and overwrites its per-call inputs with `task.perturb`
     (contents change, pointers do not);
  2. CUDA: enqueues a GPU spin long enough to cover the call's host-side launch cost (its own
     implementation's: twice its median enqueue time in the warm-up rounds), records event 0,
     calls, records event 1 on the launching stream. The events thus measure device time with
     launch overhead hidden, as in CUDA-graph replay. The perturbation's kernels run before the
     spin, outside the events, on a device left idle by step 3 of the call before;
  3. waits for event 1 (the launching stream is done), reads the host clock, synchronizes the
     whole device and reads it again: the gap ("tail") is work still running on other streams.

Graph timing (a task with `graph_layers` = L > 0, on a GPU): a call is the replay of a CUDA
graph of L consecutive calls of one implementation on the next L copies (each perturbed first,
outside the events), as the engine's layers run; its time is the replay's over L. Each
implementation's graphs are captured on first use (after one eager call per copy, so that
compilation and library set-up stay out of the capture), one per starting copy; candidate code
that cannot be captured is rejected (`graph-capture`) and the worker discarded. The recheck
output of a replay is its first call's, observed on that call's copy.

Three times during the timed rounds (after each third of them), a few calls per
implementation run without the spin, timed by events and by a synchronized host clock around
the same call (the host/event cross-check; `Series.xbatch` says which of the three batches a
call belongs to, so the parent can tell work that escapes the events on every call from a
moment of interference). Outputs of the candidate calls the parent picked are cloned (outside
the events) for re-checking. On the CPU the same schedule is timed with perf_counter
(interpreter figures, no speed claim).

Python's cyclic garbage collector is off during the rounds: a collection landing between an
event and the host clock reading would otherwise show up as time outside the events. The full
collection before them runs when the scenario's inputs are built (`Prepare`, before the
exclusive hold), not inside the hold: with torch loaded it costs ~0.1 s. Every timer the loop
uses was captured at import of this module, before any candidate code.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from evokernel.evaluate.process.channel import FatalError
from evokernel.evaluate.protocol import Recheck, Series, Time
from evokernel.evaluate.worker.calls import Caller, classify, clone_inputs, observed
from evokernel.reasons import reason
from evokernel.tasks.base import Scenario, Task
from evokernel.tasks.rng import derive_seed

_perf = time.perf_counter
# torch.cuda.synchronize() and Event.record() without a stream look the device and the current
# stream up in Python on every call (~10-50 us): the loop uses the bare synchronize of the
# worker's one device and records on the launching stream the guards captured at set-up.
_cuda_sync = getattr(torch._C, "_cuda_synchronize", torch.cuda.synchronize)
_current_stream = torch.cuda.current_stream
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_ev_sync = torch.cuda.Event.synchronize
_sleep = torch.cuda._sleep
_CUDAGraph = torch.cuda.CUDAGraph
_graph = torch.cuda.graph
_Stream = torch.cuda.Stream
_gc_collect, _gc_disable, _gc_enable = gc.collect, gc.disable, gc.enable
_gc_isenabled = gc.isenabled

_SPIN_MIN_US = 30.0
_SPIN_MAX_US = 3000.0
_SPIN_PROBE_US = 1000.0  # while enqueue times are measured (host time: any busy GPU will do)
_XCHECK_CALLS = 8  # per implementation and batch
XCHECK_BATCHES = 3


def spin_cycles_per_us() -> float:
    """Clock cycles of `torch.cuda._sleep` per microsecond, measured with events."""
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    rates = []
    for cycles in (200_000, 1_000_000, 1_000_000):
        _cuda_sync()
        _record(start)
        _sleep(cycles)
        _record(end)
        _cuda_sync()
        rates.append(cycles / max(_elapsed(start, end) * 1e3, 1e-3))
    return sorted(rates)[1]


def copy_bandwidth_gbps(nbytes: int = 1 << 30) -> float:
    """Read + write bytes per second of a large device-to-device copy, in GB/s."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    times = []
    for i in range(12):
        _cuda_sync()
        _record(start)
        dst.copy_(src)
        _record(end)
        _cuda_sync()
        if i >= 2:
            times.append(_elapsed(start, end) * 1e-3)
    del src, dst
    torch.cuda.empty_cache()
    best = sorted(times)[len(times) // 2]
    return 2 * nbytes / best / 1e9


@dataclass
class TimingOutcome:
    """Raw figures per implementation; or the reason a call failed (and whose call it was)."""

    series: dict[str, Series] = field(default_factory=dict)
    rechecks: list[Recheck] = field(default_factory=list)
    spin_us: float = 0.0  # the longest implementation's spin
    reason: str | None = None
    implementation: str | None = None


class TimedScenario:
    """One scenario's timed phase; `run()` returns the raw figures for the parent."""

    def __init__(
        self,
        task: Task,
        scenario: Scenario,
        dtype: torch.dtype,
        fns: dict[str, Callable[..., Any]],
        caller: Caller,
        msg: Time,
        spin_rate: float,
    ) -> None:
        self.task, self.scenario, self.fns, self.caller = task, scenario, fns, caller
        self.cuda = caller.cuda
        self.rounds = msg.rounds
        self.timed_from = msg.timed_from
        self.perturb_base = msg.perturb_seed
        self.recheck = set(msg.recheck)
        self.spin_rate = spin_rate
        bases = [task.make_inputs(scenario, s, dtype, caller.device) for s in msg.base_seeds]
        self.copies = [clone_inputs(bases[i % len(bases)]) for i in range(msg.copies)]
        del bases
        if self.cuda:
            self.ev0, self.ev1 = _Event(enable_timing=True), _Event(enable_timing=True)
            self.stream = caller.guards.launch_stream or _current_stream()
        self.layers = task.graph_layers if self.cuda and task.graph_layers > 0 else 0
        assert not self.layers or len(self.copies) >= self.layers, "fewer copies than layers"
        self.graphs: dict[tuple[str, int], tuple[Any, Any]] = {}  # (name, first copy)
        self.capture_stream: Any = None
        self.last_inputs: dict[str, Any] = {}
        self._first_baseline_calls()
        self.counter = 0
        _gc_collect()  # here (before the exclusive hold when prepared ahead), not in run()

    def _first_baseline_calls(self) -> None:
        """Each baseline's first call on this scenario's shapes, untimed, here (`Prepare`,
        under the shared lock) rather than in the exclusive hold's warm-up rounds: a library
        may set up per shape on its first call (cuDNN's SDPA took up to 1.4 s per attention
        shape in a fresh process on an H100; done while the timed phase held the device, that
        was most of the attention task's exclusive hold). A failure is left to the timed
        rounds, which report it as the baseline's. The candidate's first calls on these
        shapes were its correctness checks."""
        try:
            for name, fn in self.fns.items():
                if name.startswith("baseline:"):
                    fn(**self.copies[0])
            if self.cuda:
                _cuda_sync()
        except Exception:
            pass

    def _prepare(self) -> dict[str, Any]:
        inputs = self.copies[self.counter % len(self.copies)]
        self.task.perturb(inputs, derive_seed(self.perturb_base, self.counter))
        self.counter += 1
        return inputs

    def _next_call(self, name: str) -> Callable[[], Any]:
        """Perturb the next call's inputs (L copies in graph mode; `last_inputs` is the
        first's) and return what launches it: the implementation on them, or the replay of
        its graph over them."""
        if not self.layers:
            inputs = self.last_inputs = self._prepare()
            fn = self.fns[name]
            return lambda: fn(**inputs)
        first = self.counter % len(self.copies)
        self.last_inputs = self.copies[first]
        for _ in range(self.layers):
            self._prepare()
        graph, out = self._graph(name, first)

        def replay() -> Any:
            graph.replay()
            return out

        return replay

    def _graph(self, name: str, first: int) -> tuple[Any, Any]:
        """The CUDA graph of `name` over copies first..first+L-1 and its first call's output,
        captured on first use. Raises FatalError (`graph-capture`) when it cannot be."""
        key = (name, first)
        if key in self.graphs:
            return self.graphs[key]
        fn = self.fns[name]
        seq = [self.copies[(first + j) % len(self.copies)] for j in range(self.layers)]
        if self.capture_stream is None:
            self.capture_stream = _Stream()  # trusted code: the capture's side stream
        graph = _CUDAGraph()
        try:
            if not any(k[0] == name for k in self.graphs):
                with self.caller.guards.active():
                    for inputs in seq:  # compile and library set-up outside the capture
                        fn(**inputs)
                _cuda_sync()
            with _graph(graph, stream=self.capture_stream), self.caller.guards.active():
                outs = [fn(**inputs) for inputs in seq]
            _cuda_sync()
        except BaseException as err:
            if isinstance(err, KeyboardInterrupt):
                raise
            text = f"{type(err).__name__}: {err}"[:300]
            line = reason("graph-capture", f"{name}: {text}; the worker was discarded")
            raise FatalError(line) from None
        self.graphs[key] = (graph, outs[0])
        return self.graphs[key]

    def _timed_call(self, name: str, spin_us: float) -> tuple[Any, str | None, list[float]]:
        """(output, reason, [event_us, tail_us, enqueue_us]); in graph mode event_us is the
        replay's over the L calls it holds."""
        if not self.cuda:  # never graph-timed
            inputs = self.last_inputs = self._prepare()
            t0 = _perf()
            out, line = self.caller.call(self.fns[name], inputs)
            t1 = _perf()
            return out, line, [(t1 - t0) * 1e6, 0.0, 0.0]
        launch = self._next_call(name)
        if spin_us > 0:
            _sleep(int(spin_us * self.spin_rate))
        t0 = _perf()
        _record(self.ev0, self.stream)
        with self.caller.guards.active():
            try:
                out = launch()
            except BaseException as err:
                if isinstance(err, KeyboardInterrupt):
                    raise
                return None, self._classified(err), []
        _record(self.ev1, self.stream)
        t1 = _perf()
        try:
            _ev_sync(self.ev1)
            t2 = _perf()
            _cuda_sync()
            t3 = _perf()
        except BaseException as err:
            return None, self._classified(err), []
        event_us = _elapsed(self.ev0, self.ev1) * 1e3 / max(1, self.layers)
        return out, None, [event_us, (t3 - t2) * 1e6, (t1 - t0) * 1e6]

    def _observed(self, out: Any) -> tuple[Any, str | None]:
        """A copy of what the parent re-checks for the call just made: its output, or the
        task's observation of it (in-place outputs) on that call's inputs."""
        if not self.task.writes:
            return out.detach().clone(), None
        got, line = observed(self.task, self.last_inputs, out, None)
        return (got.detach().clone() if got is not None else None), line

    def _classified(self, err: BaseException) -> str:
        return classify(err, self.caller.path)

    def _cross_check(self, name: str) -> tuple[float, float] | str:
        """(host_us, event_us) of one call without the spin, or a reason line."""
        launch = self._next_call(name)
        _cuda_sync()
        t0 = _perf()
        _record(self.ev0, self.stream)
        try:
            with self.caller.guards.active():
                launch()
            _record(self.ev1, self.stream)
            _cuda_sync()
        except BaseException as err:
            if isinstance(err, KeyboardInterrupt):
                raise
            return self._classified(err)
        t1 = _perf()
        return (t1 - t0) * 1e6, _elapsed(self.ev0, self.ev1) * 1e3

    def _cross_check_batch(
        self, batch: int, raw: dict[str, dict[str, list[Any]]]
    ) -> TimingOutcome | None:
        for _ in range(_XCHECK_CALLS):
            for name in self.fns:  # interleaved, like the timed rounds
                got = self._cross_check(name)
                if isinstance(got, str):
                    return TimingOutcome(reason=got, implementation=name)
                raw[name]["xhost_us"].append(got[0])
                raw[name]["xevent_us"].append(got[1])
                raw[name]["xbatch"].append(batch)
        return None

    def _spins(self, enqueued: dict[str, list[float]]) -> dict[str, float]:
        """Per implementation, a spin long enough to hide its host-side launch cost: twice its
        median enqueue time plus 20 us, within [_SPIN_MIN_US, _SPIN_MAX_US]. `enqueued` holds
        the warm-up rounds' enqueue times (the first call of each left out: allocations);
        without warm-up rounds, three probe calls per implementation measure them."""
        if not self.cuda:
            return dict.fromkeys(self.fns, 0.0)
        spins = {}
        for name in self.fns:
            enq = enqueued.get(name, [])[1:] or self._probe(name)
            spins[name] = min(_SPIN_MAX_US, max(_SPIN_MIN_US, 2.0 * statistics.median(enq) + 20))
        return spins

    def _probe(self, name: str) -> list[float]:
        """Enqueue times of three calls ([_SPIN_MAX_US] if one fails: the rounds report it)."""
        enq = []
        for _ in range(3):
            out, line, figures = self._timed_call(name, _SPIN_PROBE_US)
            if line is not None:
                return [_SPIN_MAX_US]
            enq.append(figures[2])
            del out
        return enq

    def _cross_checks_after(self) -> list[int]:
        """Indices of the rounds after which a cross-check batch runs (one per third)."""
        if not self.cuda:
            return []
        reps = max(1, len(self.rounds) - self.timed_from)
        last = len(self.rounds) - 1
        return [min(last, self.timed_from - 1 + max(1, reps * k // XCHECK_BATCHES))
                for k in range(1, XCHECK_BATCHES + 1)]  # fmt: skip

    def run(self) -> TimingOutcome:
        enabled = _gc_isenabled()
        _gc_disable()
        try:
            return self._run()
        finally:
            if enabled:
                _gc_enable()

    def _run(self) -> TimingOutcome:
        # Warm-up rounds run with the probe spin and measure each implementation's enqueue
        # time, which sizes its spin for the timed rounds.
        enqueued: dict[str, list[float]] = {name: [] for name in self.fns}
        spins = dict.fromkeys(self.fns, _SPIN_PROBE_US if self.cuda else 0.0)
        raw: dict[str, dict[str, list[Any]]] = {
            name: {k: [] for k in ("event_us", "tail_us", "enqueue_us", "xhost_us", "xevent_us",
                                   "xbatch")}
            for name in self.fns
        }  # fmt: skip
        marks = self._cross_checks_after()
        rechecks: list[Recheck] = []
        for index, order in enumerate(self.rounds):
            if index == self.timed_from:
                spins = self._spins(enqueued)
            for name in order:
                counter = self.counter
                out, line, figures = self._timed_call(name, spins[name])
                if line is not None:
                    return TimingOutcome(reason=line, implementation=name)
                if name == "candidate" and type(out) is not torch.Tensor:
                    line = reason("output-type", f"a timed call returned {type(out).__name__}")
                    return TimingOutcome(reason=line, implementation=name)
                if index < self.timed_from:
                    enqueued[name].append(figures[2])
                    continue
                for key, value in zip(("event_us", "tail_us", "enqueue_us"), figures):
                    raw[name][key].append(value)
                if name == "candidate" and index - self.timed_from in self.recheck:
                    kept, line = self._observed(out)
                    if line is not None:
                        return TimingOutcome(reason=line, implementation=name)
                    rechecks.append(Recheck(index - self.timed_from, counter, kept))
            for batch, mark in enumerate(marks):
                if mark == index:
                    failed = self._cross_check_batch(batch, raw)
                    if failed is not None:
                        return failed
        series = {name: Series(**figures) for name, figures in raw.items()}
        return TimingOutcome(series=series, rechecks=rechecks, spin_us=max(spins.values()))
