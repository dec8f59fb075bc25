"""`bench decode` result files (kind "evokernel-bench-decode", schema 1), read and checked.

`load_bench(paths)` reads one or more files and refuses, with one line, a file that is not such
a result, a schema it does not know, or files from different GPUs (or devices): their figures
cannot be put on one axis. Figures that are null, missing or not finite stay None ("not
measured"). Series are keyed by system; when several files hold the same system, the file's
name tells them apart, so two runs of one system can be compared.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokernel.errors import EvokernelError

KIND = "evokernel-bench-decode"
SCHEMA = 1
FIGURES = (
    "tok_s",
    "ms_p50",
    "ms_p95",
    "ms_p99",
    "ms_mean",
    "floor_ms",
    "pct_floor",
    "ttft_ms",
    "power_w",
    "tok_per_j",
)


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

    def positions(self) -> list[int]:
        return sorted({r.position for r in self.rows})


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _read(path: Path) -> BenchFile:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise EvokernelError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise EvokernelError(f"{path}: not a JSON file ({type(err).__name__})") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise EvokernelError(f'{path}: not a bench decode result (no "kind": "{KIND}")')
    if doc.get("schema") != SCHEMA:
        raise EvokernelError(f"{path}: bench decode schema {doc.get('schema')!r}, need {SCHEMA}")
    if not isinstance(doc.get("results"), list):
        raise EvokernelError(f'{path}: no "results" list')
    return BenchFile(path, doc)


def load_bench(paths: list[Path]) -> BenchData:
    if not paths:
        raise EvokernelError("no bench decode result file given")
    files = [_read(Path(p)) for p in paths]
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
            if isinstance(r, dict):
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
                    figures={name: _number(r.get(name)) for name in FIGURES},
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
