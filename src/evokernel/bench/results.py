"""The `evokernel bench decode` result file: rows, JSON + CSV writing, loading and checking.

The format is fixed by the bench schema (kind "evokernel-bench-decode", schema 1; see
docs/bench.md): fields may be added, never renamed. `Row` is one system at one context
position; a row whose system failed there has `error` set and null figures. `validate(doc)`
lists what is wrong with a document (empty when it is well formed); `load` refuses a file
that is not one, with a one-line error.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from evokernel.errors import EvokernelError
from evokernel.model.config import read_json_object

KIND = "evokernel-bench-decode"
SCHEMA = 1
FIGURES = (
    "tok_s", "ms_p50", "ms_p95", "ms_p99", "ms_mean", "floor_ms", "pct_floor", "ttft_ms",
    "power_w", "tok_per_j", "ms_host_mean", "outliers", "wall_s",
)  # fmt: skip
# Figures every successful row has (the others may be null: power where NVML is missing).
MEASURED = ("tok_s", "ms_p50", "ms_p95", "ms_p99", "ms_mean", "floor_ms", "pct_floor", "ttft_ms")
TOP_KEYS = (
    "kind", "schema", "created", "suite", "label", "command", "model", "env", "options",
    "systems", "results",
)  # fmt: skip


@dataclass
class Row:
    system: str
    position: int  # context position at which the decode steps are timed
    steps: int  # timed decode steps
    tok_s: float | None = None  # batch / median step time
    ms_p50: float | None = None
    ms_p95: float | None = None
    ms_p99: float | None = None
    ms_mean: float | None = None
    floor_ms: float | None = None  # (weight_bytes + kv_bytes_per_token * position) / copy bw
    pct_floor: float | None = None  # 100 * floor_ms / ms_p50
    ttft_ms: float | None = None  # prefill of `position` tokens + the first token
    power_w: float | None = None  # mean board power while the timed steps re-run
    tok_per_j: float | None = None  # tok_s / power_w
    error: str | None = None  # one line when this system failed at this position
    # Added to schema 1 (readers ignore what they do not know):
    ms_host_mean: float | None = None  # synchronized host clock over the timed steps / steps
    outliers: int | None = None  # timed steps beyond the IQR fences (kept in the percentiles)
    wall_s: float | None = None  # wall time of this row: cache, graphs, compiles, all steps

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in FIGURES:
            if isinstance(d[key], float):
                d[key] = _round(d[key])
        return d


def _round(x: float) -> float | None:
    return float(f"{x:.6g}") if math.isfinite(x) else None


def error_line(err: BaseException) -> str:
    """One line naming the exception: `OutOfMemoryError: CUDA out of memory. ...`."""
    text = str(err).strip().splitlines()
    first = text[0] if text else ""
    line = f"{type(err).__name__}: {first}" if first else type(err).__name__
    return line[:300]


def write(doc: dict[str, Any], path: Path) -> Path:
    """Write the JSON document and its rows as CSV next to it; returns the CSV's path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    tmp.replace(path)
    csv_path = path.with_suffix(".csv")
    names = [f.name for f in fields(Row)]
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=names)
        writer.writeheader()
        for row in doc["results"]:
            writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in names})
    return csv_path


def load(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    doc = read_json_object(p)  # one-line errors for unreadable or malformed files
    problems = validate(doc)
    if problems:
        raise EvokernelError(f"{p}: not a bench decode result file ({problems[0]})")
    return doc


def validate(doc: Any) -> list[str]:
    """What is wrong with a result document; empty when it follows the schema."""
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    if doc.get("kind") != KIND:
        return [f"kind is {doc.get('kind')!r}, expected {KIND!r}"]
    if doc.get("schema") != SCHEMA:
        return [f"schema is {doc.get('schema')!r}, expected {SCHEMA}"]
    problems = [f"missing key {k!r}" for k in TOP_KEYS if k not in doc]
    if problems:
        return problems
    for key, kind in (("env", dict), ("model", dict), ("options", dict), ("systems", list),
                      ("results", list)):  # fmt: skip
        if not isinstance(doc[key], kind):
            problems.append(f"{key} is not a JSON {'object' if kind is dict else 'array'}")
    if problems:
        return problems
    for key in ("device", "gpu", "copy_gbps"):
        if key not in doc["env"]:
            problems.append(f"env lacks {key!r}")
    for key in ("weight_bytes", "kv_bytes_per_token"):
        if not isinstance(doc["model"].get(key), int):
            problems.append(f"model.{key} is not an integer")
    positions = doc["options"].get("positions", [])
    if not isinstance(positions, list) or not all(isinstance(p, int) for p in positions):
        return [*problems, "options.positions is not an array of integers"]
    if not all(isinstance(s, str) for s in doc["systems"]):
        return [*problems, "systems is not an array of names"]
    want = {(s, p) for s in doc["systems"] for p in positions}
    seen = set()
    for i, row in enumerate(doc["results"]):
        if not isinstance(row, dict):
            problems.append(f"results[{i}] is not a JSON object")
            continue
        missing = [f.name for f in fields(Row) if f.name not in row]
        if missing:
            problems.append(f"results[{i}] lacks {missing[0]!r}")
            continue
        if not isinstance(row["system"], str) or not isinstance(row["position"], int):
            problems.append(f"results[{i}] names no system and position")
            continue
        seen.add((row["system"], row["position"]))
        for key in FIGURES:
            value = row[key]
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value)):
                problems.append(f"results[{i}].{key} is {value!r}")
        if row["error"] is None:
            nulls = [k for k in MEASURED if row[k] is None]
            if nulls:
                problems.append(f"results[{i}] has no error but {nulls[0]} is null")
        elif any(row[k] is not None for k in ("tok_s", "ms_p50", "pct_floor")):
            problems.append(f"results[{i}] has an error and figures")
    for system, position in sorted(want - seen):
        problems.append(f"no row for {system} at position {position}")
    return problems
