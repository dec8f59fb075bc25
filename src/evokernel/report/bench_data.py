"""`bench decode` result files, read for the report: rows grouped into series by system.

`load_bench(paths)` reads each file through `evokernel.bench.results.load`, which refuses, in
one line, a file that is not a well-formed result (kind "evokernel-bench-decode", schema 1), and
refuses files from different GPUs (or devices): their figures cannot share an axis. Figures
that are null stay None ("not measured"). A system present in several files becomes one series
per file, named after the file, so two runs of one system can be compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokernel.bench.results import FIGURES, load
from evokernel.errors import EvokernelError
from evokernel.report.outcomes import number


@dataclass
class BenchRow:
    series: str  # the system, with the file's name when systems repeat across files
    system: str
    position: int
    steps: int | None
    figures: dict[str, float | None]
    error: str | None

    def get(self, name: str) -> float | None:
        return self.figures.get(name)


@dataclass
class BenchFile:
    path: Path
    doc: dict[str, Any]

    @property
    def env(self) -> dict[str, Any]:
        return self.doc.get("env") or {}

    @property
    def model(self) -> dict[str, Any]:
        return self.doc.get("model") or {}


@dataclass
class BenchData:
    files: list[BenchFile]
    rows: list[BenchRow] = field(default_factory=list)
    series: list[str] = field(default_factory=list)  # in the order first seen

    @property
    def gpu(self) -> str:
        env = self.files[0].env
        return str(env.get("gpu") or env.get("device") or "unknown device")

    @property
    def cpu(self) -> bool:
        return self.files[0].env.get("device") == "cpu"

    def of(self, series: str) -> list[BenchRow]:
        return sorted((r for r in self.rows if r.series == series), key=lambda r: r.position)


def load_bench(paths: list[Path]) -> BenchData:
    if not paths:
        raise EvokernelError("no bench decode result file given")
    files = [BenchFile(Path(p), load(p)) for p in paths]
    first = files[0]
    for f in files[1:]:
        for key in ("device", "gpu"):
            a, b = first.env.get(key), f.env.get(key)
            if a != b:
                raise EvokernelError(
                    f"{f.path} was measured on {key} {b!r}, {first.path} on {a!r}: "
                    "report only files of one GPU together"
                )
    systems: dict[str, set[Path]] = {}
    for f in files:
        for r in f.doc["results"]:
            systems.setdefault(str(r.get("system")), set()).add(f.path)
    data = BenchData(files)
    for f in files:
        for k, r in enumerate(f.doc["results"]):
            if not isinstance(r, dict) or not isinstance(r.get("position"), int):
                raise EvokernelError(f'{f.path}: results[{k}] has no integer "position"')
            system = str(r.get("system"))
            series = system if len(systems[system]) == 1 else f"{system} ({f.path.stem})"
            if series not in data.series:
                data.series.append(series)
            data.rows.append(
                BenchRow(
                    series=series,
                    system=system,
                    position=r["position"],
                    steps=r.get("steps") if isinstance(r.get("steps"), int) else None,
                    figures={name: number(r.get(name)) for name in FIGURES},
                    error=str(r["error"]) if r.get("error") else None,
                )
            )
    return data


def floor_tok_s(data: BenchData) -> list[tuple[float, float]]:
    """The bandwidth floor as tokens per second by position (batch / floor time), from the
    first file that states it at each position."""
    batch = (data.files[0].doc.get("options") or {}).get("batch") or 1
    out: dict[int, float] = {}
    for r in data.rows:
        floor = r.get("floor_ms")
        if floor and r.position not in out:
            out[r.position] = batch * 1000.0 / floor
    return sorted(out.items())
