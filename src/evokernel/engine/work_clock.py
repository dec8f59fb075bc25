"""Device time of the batch runner's launches, by kind of work, for the server's accounts.

    clock = WorkClock(cuda=True)
    mark = clock.start()                                   # before a launch
    ...                                                    # the launch (a graph replay)
    clock.stop(mark, "decode", units=5, padded=8)         # after it
    clock.collect()                                        # folds in every finished launch
    clock.totals["decode"]                                 # WorkTotals: launches, seconds, ...

On CUDA a mark is a pair of timing events around the launch on the current stream, so the
seconds are the device's own: the time from the stream reaching the launch to its end, not
counting the queue before it. A launch is folded in by `collect()` once its end event has
completed (a query, never a wait). On the CPU the work is synchronous and `stop` folds it in at
once, timed by the host clock.

`units` counts what the launch did for its requests (prompt tokens for a prefill, active rows
for a decode step) and `padded` what it computed (the length bucket, the batch bucket), so
their ratio says how much of the device's time went to padding.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

import torch


@dataclass
class WorkTotals:
    launches: int = 0
    seconds: float = 0.0
    units: int = 0
    padded: int = 0


class WorkClock:
    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.totals: dict[str, WorkTotals] = {}
        self._open: deque[tuple[Any, Any, str, int, int]] = deque()

    def start(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, mark: Any, work: str, units: int, padded: int) -> None:
        if not self.cuda:
            self._add(work, time.perf_counter() - mark, units, padded)
            return
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self._open.append((mark, end, work, units, padded))

    def collect(self) -> None:
        """Fold in every launch whose end has completed, in launch order."""
        while self._open and self._open[0][1].query():
            start, end, work, units, padded = self._open.popleft()
            self._add(work, start.elapsed_time(end) / 1e3, units, padded)

    def snapshot(self) -> dict[str, dict[str, float]]:
        """The totals as plain numbers (picklable, JSON-able)."""
        return {work: asdict(t) for work, t in self.totals.items()}

    def _add(self, work: str, seconds: float, units: int, padded: int) -> None:
        t = self.totals.setdefault(work, WorkTotals())
        t.launches += 1
        t.seconds += seconds
        t.units += units
        t.padded += padded
