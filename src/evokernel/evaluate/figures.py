"""From raw per-call times to a `ScenarioResult`, in the parent; and the judgements that need
timings (host/event cross-check, profiler kernel list).

Speedup: against the fastest baseline by median, the median of per-round ratios
baseline/candidate with a bootstrap 95% interval (stats.paired_speedup). Roofline:
roofline_us = bytes_moved / measured copy bandwidth; pct_roofline = roofline_us / candidate
median. Flags (a flagged scenario is not a win):

  beyond-roofline    the candidate is more than 5% faster than the bytes allow (read-only
                     traffic can beat a copy's bandwidth by a few percent, no more)
  baseline-slowdown  the baseline ran >25% slower in the candidate's process than in the clean
                     calibration worker: the candidate may be handicapping it

Timer cross-check (reason `timer-mismatch`), CUDA only, each against the baselines measured in
the same worker:
  tail   after the launching stream finished, a device-wide synchronize still waited for work
         (median over calls) more than max(10 us, 25% of the candidate's time) longer than for
         the baselines, in each third of the timed rounds: work ran on another stream,
         outside the events (it does so on every call; a spell of interference, which once
         rejected an honest two-kernel candidate on an H200 under a full sweep, covers a part);
  host   a synchronized host clock around un-spun calls exceeded the events by more than
         max(20 us, 50% of the candidate's time) beyond the baselines' own excess, in every
         one of the cross-check batches (spread over the timed rounds). Work that escapes the
         events does so on every call; a moment of interference (another process's GPU work
         delaying the first event, the host thread descheduled between the last event and the
         clock) hits one batch, and the same moment hits the candidate's and the baselines'
         calls unequally, so one batch alone is no evidence.

CPU figures are interpreter perf_counter times: no speedup, no roofline.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from evokernel.evaluate.protocol import GpuEvent, Series
from evokernel.evaluate.result import ScenarioResult, TimingStats
from evokernel.evaluate.stats import median, paired_speedup, timing_stats
from evokernel.reasons import reason
from evokernel.tasks.base import Scenario, Task

BEYOND_ROOFLINE_PCT = 105.0
BASELINE_SLOWDOWN = 1.25
KERNEL_SHARE = 0.5
TAIL_PARTS = 3


def timer_problems(series: dict[str, Series], scenario: str) -> list[str]:
    cand = series.get("candidate")
    bases = [v for k, v in series.items() if k != "candidate"]
    if not cand or not bases or not cand.event_us:
        return []
    event = median(cand.event_us)
    found = []
    tail = median(cand.tail_us)
    base_tail = max(median(b.tail_us) for b in bases)
    parts = _tail_parts(cand, bases)
    allowed = max(10.0, 0.25 * event)
    if parts and all(mine > theirs + allowed for mine, theirs in parts):
        thirds = ", ".join(f"{mine:.1f}/{theirs:.1f}" for mine, theirs in parts)
        found.append(
            reason(
                "timer-mismatch",
                f"{scenario}: the device stayed busy {tail:.1f} us after the launching stream "
                f"finished (baselines {base_tail:.1f} us; candidate events {event:.1f} us; "
                f"per third of the rounds, candidate/baselines: {thirds} us)",
            )
        )
    host = _host_excess(cand, bases)
    if host is not None:
        excess, base_excess, x_event = host
        found.append(
            reason(
                "timer-mismatch",
                f"{scenario}: synchronized host time exceeds event time by {excess:.1f} us "
                f"(baselines {base_excess:.1f} us; candidate events {x_event:.1f} us)",
            )
        )
    return found


def _tail_parts(cand: Series, bases: list[Series]) -> list[tuple[float, float]]:
    """(candidate's median tail, the baselines' largest) in each of `TAIL_PARTS` consecutive
    parts of the timed rounds. The tail check needs the excess in every part: work that
    escapes the stream does so on every call, while a spell of interference (host load,
    another context) covers a part."""
    parts = min(TAIL_PARTS, len(cand.tail_us), *(len(b.tail_us) for b in bases))
    return [
        (
            median(_part(cand.tail_us, i, parts)),
            max(median(_part(b.tail_us, i, parts)) for b in bases),
        )
        for i in range(parts)
    ]


def _part(values: list[float], i: int, parts: int) -> list[float]:
    n = len(values)
    return values[i * n // parts : (i + 1) * n // parts]


def _batches(s: Series) -> dict[int, tuple[list[float], list[float]]]:
    """(host, event) times of one implementation's cross-check calls, per batch."""
    marks = s.xbatch if len(s.xbatch) == len(s.xhost_us) else [0] * len(s.xhost_us)
    out: dict[int, tuple[list[float], list[float]]] = {}
    for b, h, e in zip(marks, s.xhost_us, s.xevent_us):
        hosts, events = out.setdefault(b, ([], []))
        hosts.append(h)
        events.append(e)
    return out


def _host_excess(cand: Series, bases: list[Series]) -> tuple[float, float, float] | None:
    """(excess, baselines' excess, candidate event us) of the batch closest to passing, when
    every batch shows the candidate's host time beyond its events; None otherwise."""
    mine = _batches(cand)
    theirs = [_batches(b) for b in bases]
    if not mine:
        return None
    closest: tuple[float, float, float, float] | None = None  # (margin, excess, base, event)
    for batch, (hosts, events) in mine.items():
        others = [t[batch] for t in theirs if batch in t]
        if not others:
            return None
        excess = median([h - e for h, e in zip(hosts, events)])
        base = max(median([h - e for h, e in zip(hs, es)]) for hs, es in others)
        x_event = median(events)
        margin = excess - base - max(20.0, 0.5 * x_event)
        if margin <= 0:
            return None
        if closest is None or margin < closest[0]:
            closest = (margin, excess, base, x_event)
    assert closest is not None
    return closest[1], closest[2], closest[3]


def _matches(kernel: str, names: list[str]) -> bool:
    base = kernel.split("(")[0].strip()
    return any(base == n or base.startswith(n + "_") for n in names)


def profile_problems(
    events: list[GpuEvent], kernels: list[str], scenario: str
) -> tuple[list[str], list[dict[str, Any]]]:
    """(reason lines, the kernel list kept as an artifact). The first event is the marker."""
    if not events:
        return [], []
    launch = events[0].stream
    rest = events[1:]
    listing = [{"name": e.name, "stream": e.stream, "us": round(e.dur, 2)} for e in rest]
    found = []
    elsewhere = sorted({e.name[:60] for e in rest if e.stream != launch})
    if elsewhere:
        found.append(
            reason(
                "side-stream", f"{scenario}: GPU work on another stream: {', '.join(elsewhere[:4])}"
            )
        )
    total = sum(e.dur for e in rest if e.cat == "kernel")
    own = sum(e.dur for e in rest if e.cat == "kernel" and _matches(e.name, kernels))
    if not kernels:
        found.append(
            reason("kernels-missing", f"{scenario}: the candidate defines no @triton.jit kernel")
        )
    elif own == 0:
        found.append(
            reason(
                "kernels-missing",
                f"{scenario}: none of the candidate's kernels ({', '.join(kernels)}) ran",
            )
        )
    elif own < KERNEL_SHARE * total:
        found.append(
            reason(
                "kernels-missing",
                f"{scenario}: the candidate's kernels took {100 * own / total:.0f}% of the GPU "
                f"time of its calls (at least {100 * KERNEL_SHARE:.0f}% required)",
            )
        )
    return found, listing


def scenario_result(
    task: Task,
    scenario: Scenario,
    dtype: torch.dtype,
    series: dict[str, Series],
    device: str,
    copy_gbps: float,
    clean_baselines: dict[str, float],
) -> ScenarioResult:
    cand = series["candidate"].event_us
    baselines: dict[str, TimingStats] = {}
    for key, values in series.items():
        if key != "candidate":
            baselines[key.removeprefix("baseline:")] = timing_stats(values.event_us)
    fastest = min(baselines, key=lambda k: baselines[k].median_us)
    cand_stats = timing_stats(cand)
    bytes_moved = task.bytes_moved(scenario, dtype)
    speedup = None
    ci = None
    roofline_us = achieved = pct = 0.0
    host_event_ratio = 0.0
    flags: list[str] = []
    if device == "cuda":
        speedup, ci = paired_speedup(series[f"baseline:{fastest}"].event_us, cand)
        if copy_gbps > 0:
            roofline_us = bytes_moved / (copy_gbps * 1e3)
        if cand_stats.median_us > 0:
            achieved = bytes_moved / (cand_stats.median_us * 1e3)
            pct = 100.0 * roofline_us / cand_stats.median_us
        xhost = series["candidate"].xhost_us
        xevent = series["candidate"].xevent_us
        if xhost and median(xevent) > 0:
            host_event_ratio = median(xhost) / median(xevent)
        if roofline_us > 0 and pct > BEYOND_ROOFLINE_PCT:
            flags.append("beyond-roofline")
        clean = clean_baselines.get(fastest)
        here = baselines[fastest].median_us
        if clean and here > BASELINE_SLOWDOWN * clean + 1.0:
            flags.append("baseline-slowdown")
    return ScenarioResult(
        name=scenario.name,
        regime=scenario.regime,
        params=json.loads(json.dumps(dict(scenario.params))),  # tuples as lists, as in JSON
        dtype=str(dtype).removeprefix("torch."),
        candidate=cand_stats,
        baselines=baselines,
        baseline=fastest,
        speedup=speedup,
        speedup_ci=ci,
        bytes_moved=bytes_moved,
        achieved_gbps=achieved,
        roofline_us=roofline_us,
        pct_roofline=pct,
        host_event_ratio=host_event_ratio,
        flags=flags,
    )
