"""The `evokernel bench decode` result file: rows, JSON + CSV writing, loading and checking.

The format is fixed by the bench schema (kind "evokernel-bench-decode", schema 1; see
docs/bench.md): fields may be added, never renamed. `Row` is one system at one context
position; a row whose system failed there has `error` set and null figures. `validate(doc)`
lists what is wrong with a document (empty when it is well formed); `load` refuses a file
that is not one, with a one-line error (a FIFO or device given as a file is refused before it
is opened for reading: no hang).

What `validate` holds a figure to, beyond its type: a number is an int or float, never a
boolean (JSON `true` is no latency), and finite; every figure is >= 0, and those a measured
row must have (`MEASURED`) are > 0, as are power and tok/J where given; the percentiles are
ordered (P50 <= P95 <= P99, within rounding); `outliers` and `steps` are integers, positions
>= 1, the model's byte counts positive integers, the copy bandwidth positive where given.
A file that breaks one of these was not written by `bench decode`, or was edited: its ratios
and plots would be nonsense (a ratio of -0.2, a negative latency plotted), so it is refused.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from evokernel.errors import EvokernelError
from evokernel.files import output_file, read_regular

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
    """Write the JSON document and its rows as CSV next to it, each atomically and readable by
    others, and only over regular files (a device, FIFO or link under /proc there is refused
    and left as it is: evokernel.files.output_file); returns the CSV's path."""
    from evokernel.evolve.rundir import atomic_write

    csv_path = path.with_suffix(".csv")
    targets = output_file(path), output_file(csv_path)
    names = [f.name for f in fields(Row)]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=names)
    writer.writeheader()
    for row in doc["results"]:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in names})
    texts = json.dumps(doc, indent=1, allow_nan=False) + "\n", table.getvalue()
    for target, text in zip(targets, texts):
        atomic_write(target, text)
        os.chmod(target, 0o644)
    return csv_path


def load(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        data = read_regular(p)
    except FileNotFoundError:
        raise EvokernelError(f"{p}: no such file") from None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise EvokernelError(f"{p}: not valid JSON ({msg})") from None
    problems = validate(doc)
    if problems:
        raise EvokernelError(f"{p}: not a bench decode result file ({problems[0]})")
    return doc


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_count(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


POSITIVE = (*MEASURED, "power_w", "tok_per_j")  # > 0 wherever given
# P50 <= P95 <= P99 up to the 6 significant digits `Row.to_dict` keeps.
_ORDER_SLACK = 1e-5


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
    copy = doc["env"].get("copy_gbps")
    if copy is not None and not (_is_number(copy) and copy > 0):
        problems.append(f"env.copy_gbps is {copy!r}, not a positive number")
    for key in ("weight_bytes", "kv_bytes_per_token"):
        if not _is_count(doc["model"].get(key), 1):
            problems.append(f"model.{key} is not a positive integer")
    positions = doc["options"].get("positions", [])
    if not isinstance(positions, list) or not all(_is_count(p, 1) for p in positions):
        return [*problems, "options.positions is not an array of integers >= 1"]
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
        if not isinstance(row["system"], str) or not _is_count(row["position"], 1):
            problems.append(f"results[{i}] names no system and position")
            continue
        seen.add((row["system"], row["position"]))
        problems += _row_problems(i, row)
        if row["error"] is not None and not isinstance(row["error"], str):
            problems.append(f"results[{i}].error is {row['error']!r}, not text or null")
        elif row["error"] is None:
            nulls = [k for k in MEASURED if row[k] is None]
            if nulls:
                problems.append(f"results[{i}] has no error but {nulls[0]} is null")
        elif any(row[k] is not None for k in ("tok_s", "ms_p50", "pct_floor")):
            problems.append(f"results[{i}] has an error and figures")
    for system, position in sorted(want - seen):
        problems.append(f"no row for {system} at position {position}")
    return problems


def _row_problems(i: int, row: dict[str, Any]) -> list[str]:
    """What is impossible in one row's figures (see the module doc)."""
    problems = []
    if not _is_count(row["steps"], 1):
        problems.append(f"results[{i}].steps is {row['steps']!r}, not a positive integer")
    for key in FIGURES:
        value = row[key]
        if value is None:
            continue
        if not _is_number(value):
            problems.append(f"results[{i}].{key} is {value!r}, not a finite number")
        elif value < 0 or (value == 0 and key in POSITIVE):
            bound = "> 0" if key in POSITIVE else ">= 0"
            problems.append(f"results[{i}].{key} is {value!r}; it must be {bound}")
        elif key == "outliers" and not _is_count(value):
            problems.append(f"results[{i}].outliers is {value!r}, not an integer")
    p50, p95, p99 = (row[k] for k in ("ms_p50", "ms_p95", "ms_p99"))
    if all(_is_number(v) and v > 0 for v in (p50, p95, p99)) and not (
        p50 <= p95 * (1 + _ORDER_SLACK) and p95 <= p99 * (1 + _ORDER_SLACK)
    ):
        problems.append(f"results[{i}] has P50 {p50} > P95 {p95} or P95 > P99 {p99}")
    return problems
