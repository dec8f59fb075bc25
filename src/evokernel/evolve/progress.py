"""Live progress of a running search: one refreshed panel on a terminal, plain lines otherwise.

Each update shows the iteration, evaluated / valid / failed counts, the best fitness with its
label (a speedup lower bound on cuda, "correctness only" on the CPU interpreter), the best
program's per-regime speedups, tokens and cost, the iterations in flight, and an ETA from this
session's pace. Everything comes from `summary.summarize`, the same source as `status`.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from evokernel.evolve.database import Database
from evokernel.evolve.fitness import format_regimes
from evokernel.evolve.summary import RunSummary, summarize


def _clock(seconds: float) -> str:
    s = int(max(0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def progress_line(s: RunSummary, in_flight: int, eta_s: float | None) -> str:
    if s.best is None:
        best = "best -"
    else:
        best = f"best {s.best['id']} {s.best['fitness']:.4f}"
        if s.best["regimes"]:
            best += f" ({format_regimes(s.best['regimes'])})"
    parts = [
        f"iter {s.iterations_done}/{s.iterations_target}",
        f"evaluated {s.evaluated} (valid {s.valid}, failed {s.failed}"
        + (f", screened {s.screened})" if s.screened else ")"),
        f"reused {s.reused}",
        f"rejected {s.rejected}",
        best,
        f"tokens {s.tokens} ${s.cost_usd:.4f}",
        f"in flight {in_flight}",
        f"eta {_clock(eta_s) if eta_s is not None else '-'}",
    ]
    return "  ".join(parts)


class Progress:
    def __init__(self, db: Database, stream: TextIO | None = None, live: bool | None = None):
        self.db = db
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.t0 = time.monotonic()
        self.done0 = summarize(db).iterations_done
        self._panel = None
        if self.live:
            from rich.console import Console
            from rich.live import Live

            self._panel = Live(console=Console(file=self.stream), refresh_per_second=4)
            self._panel.start()
        first = summarize(self.db)
        self._emit(f"[{first.fitness_label}]")

    def _emit(self, text: str) -> None:
        if self._panel is not None:
            self._panel.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    def update(self, in_flight: int) -> None:
        s = summarize(self.db)
        done = s.iterations_done - self.done0
        remaining = max(0, s.iterations_target - s.iterations_done)
        eta = (time.monotonic() - self.t0) / done * remaining if done > 0 else None
        line = progress_line(s, in_flight, eta)
        if self._panel is not None:
            from rich.text import Text

            self._panel.update(Text(line))
        else:
            print(f"[{time.strftime('%H:%M:%S')}] {line}", file=self.stream, flush=True)

    def note(self, text: str) -> None:
        """A one-off line (run start, migration, stop reason)."""
        self._emit(text)

    def close(self) -> None:
        if self._panel is not None:
            self._panel.stop()
            self._panel = None
