"""One system at one context position: TTFT, per-step decode times, board power -> a `Row`.

    row, cache_len = measure_cell(system, prompt, plan, floor_ms, meter, device)

For a prompt of `position` tokens, inside `system.context()`:

  1. open a session (its cache sized for `plan.need` positions), prefill once untimed (JIT,
     cuBLAS heuristics, lazy allocation);
  2. TTFT: the second prefill + first-token choice, timed;
  3. warm-up: `plan.warmup` decode steps from `position` (compiles, graph captures, re-records);
  4. rewind to `position`, time `plan.steps` decode steps, one at a time: CUDA events between
     consecutive steps (the host enqueues ahead, so each interval is the device's time for one
     step, including any gap the host leaves), and a synchronized host clock around all of
     them as a cross-check (`ms_host_mean`). Host-timed systems (the CPU, vLLM) are timed by
     the host clock per step;
  5. power: the same steps re-run (rewinding to `position`) for `plan.power_window_ms`, board
     energy read from NVML before and after (or power sampled when the GPU has no energy
     counter) -> mean watts. Skipped (null) without NVML or with a zero window. It runs on the
     same positions as the timed steps, so a long window needs no longer cache.

tok/s is batch (1) over the median step. Percentiles are over every timed step; steps past
the IQR fences are counted (`outliers`), not dropped, since P95/P99 are there to show jitter.
Any exception becomes the row's `error` (one line); the caller frees memory and goes on.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from evokernel.bench.results import Row, error_line
from evokernel.bench.systems.base import Session, System
from evokernel.nvml import Nvml

POWER_CHUNK_MS = 50.0


@dataclass(frozen=True)
class CellPlan:
    position: int
    steps: int
    warmup: int
    power_window_ms: float

    @property
    def need(self) -> int:
        """Cache positions a session must hold: the prompt, then the longest run of steps."""
        return self.position + max(self.steps, self.warmup) + 1


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    rank = (len(sorted_values) - 1) * q / 100
    lo = int(rank)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (rank - lo)


def iqr_outliers(sorted_values: list[float]) -> int:
    q1, q3 = percentile(sorted_values, 25), percentile(sorted_values, 75)
    lo, hi = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return sum(1 for v in sorted_values if v < lo or v > hi)


def measure_cell(
    system: System,
    prompt: list[int],
    plan: CellPlan,
    floor_ms: float,
    meter: Nvml | None,
    device: str,
) -> tuple[Row, int | None]:
    """The row, and the KV cache length the session allocated (None: it grows)."""
    row = Row(system=system.name, position=plan.position, steps=plan.steps)
    start = time.perf_counter()
    clock = _Clock(device, system.host_timed)
    session: Session | None = None
    cache_len: int | None = None
    try:
        with system.context():
            session = system.open(prompt, plan.need)
            cache_len = session.cache_len
            session.prefill()
            clock.sync()
            ttft_ms = clock.once(session.prefill)
            session.rewind()
            for _ in range(plan.warmup):
                session.step()
            session.rewind()
            times, host_ms = clock.steps(session, plan.steps)
            step_ms = sorted(times)[len(times) // 2]
            power_w = _power(session, plan, meter, clock, step_ms)
    except Exception as err:  # OOM, compile errors, anything: a row, and the run goes on
        row.error = error_line(err)
    finally:
        if session is not None:
            with contextlib.suppress(Exception):  # the row already says what went wrong
                session.close()
        session = None
        free(device)
    row.wall_s = time.perf_counter() - start
    if row.error is not None:
        return row, cache_len
    ordered = sorted(times)
    p50 = percentile(ordered, 50)
    row.ms_p50, row.ms_p95, row.ms_p99 = p50, percentile(ordered, 95), percentile(ordered, 99)
    row.ms_mean = sum(times) / len(times)
    row.ms_host_mean = host_ms / len(times)
    row.outliers = iqr_outliers(ordered)
    row.tok_s = 1e3 / p50
    row.floor_ms = floor_ms
    row.pct_floor = 100 * floor_ms / p50
    row.ttft_ms = ttft_ms
    if power_w is not None and power_w > 0:
        row.power_w = power_w
        row.tok_per_j = row.tok_s / power_w
    return row, cache_len


def prompt_ids(vocab_size: int, length: int) -> list[int]:
    """A fixed prompt of `length` valid ids, spread over the vocabulary (the same every run)."""
    return [(7 + 7919 * i) % vocab_size for i in range(length)]


def timed_steps(session: Session, n: int, device: str, host_timed: bool) -> list[float]:
    """Per-step ms of `n` decode steps, timed as `measure_cell` times them."""
    return _Clock(device, host_timed).steps(session, n)[0]


class _Clock:
    """CUDA events on CUDA for device-async systems; otherwise the host clock per call."""

    def __init__(self, device: str, host_timed: bool) -> None:
        self.cuda = device == "cuda"
        self.events = self.cuda and not host_timed

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def once(self, fn: Callable[[], None]) -> float:
        if not self.events:
            self.sync()
            t0 = time.perf_counter()
            fn()
            self.sync()
            return (time.perf_counter() - t0) * 1e3
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1)

    def steps(self, session: Session, n: int) -> tuple[list[float], float]:
        """(per-step ms, host ms around all n steps)."""
        self.sync()
        if not self.events:
            times = []
            t_all = time.perf_counter()
            for _ in range(n):
                t0 = time.perf_counter()
                session.step()
                self.sync()
                times.append((time.perf_counter() - t0) * 1e3)
            return times, (time.perf_counter() - t_all) * 1e3
        events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        t0 = time.perf_counter()
        events[0].record()
        for i in range(n):
            session.step()
            events[i + 1].record()
        self.sync()
        host_ms = (time.perf_counter() - t0) * 1e3
        return [events[i].elapsed_time(events[i + 1]) for i in range(n)], host_ms


def _power(
    session: Session, plan: CellPlan, meter: Nvml | None, clock: _Clock, step_ms: float
) -> float | None:
    """Mean board watts while the timed steps re-run for the power window, or None.

    Steps go in chunks of about POWER_CHUNK_MS, each followed by a sync, so the host never runs
    far ahead of the device and the window ends close to its length."""
    if meter is None or plan.power_window_ms <= 0:
        return None
    window_s = plan.power_window_ms / 1e3
    chunk = max(1, min(plan.steps, int(POWER_CHUNK_MS / max(step_ms, 1e-3))))
    clock.sync()
    e0, t0 = meter.energy_mj(), time.perf_counter()
    samples: list[float] = []
    done = plan.steps  # steps since the last rewind: rewind first
    while time.perf_counter() - t0 < window_s:
        for _ in range(chunk):
            if done == plan.steps:
                session.rewind()
                done = 0
            session.step()
            done += 1
        clock.sync()
        sample = meter.power_w()
        if sample is not None:
            samples.append(sample)
    e1, t1 = meter.energy_mj(), time.perf_counter()
    if e0 is not None and e1 is not None and e1 > e0:
        return (e1 - e0) / 1e3 / (t1 - t0)
    return sum(samples) / len(samples) if samples else None


def free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
