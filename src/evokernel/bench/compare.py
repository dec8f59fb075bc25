"""`evokernel bench decode --compare A.json B.json`: B against A, per system and position.

    table = compare_files("a.json", "b.json")   # -> Comparison; refuses files of another GPU

A ratio is B's tok/s over A's for the same system at the same position, with each file's % of
its own floor beside it. Ratios between two runs are only meaningful on the same hardware, so
files whose `env.device` or `env.gpu` differ are refused (one-line error). A system or position
missing from one file, or failed there, has no ratio (null).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evokernel.bench.results import load
from evokernel.errors import EvokernelError


@dataclass
class Ratio:
    system: str
    position: int
    tok_s_a: float | None
    tok_s_b: float | None
    ratio: float | None  # tok_s_b / tok_s_a
    pct_floor_a: float | None
    pct_floor_b: float | None


@dataclass
class Comparison:
    a: str
    b: str
    device: str
    gpu: str | None
    ratios: list[Ratio]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "evokernel-bench-decode-compare",
            "a": self.a,
            "b": self.b,
            "device": self.device,
            "gpu": self.gpu,
            "ratios": [asdict(r) for r in self.ratios],
        }


def compare_files(a_path: str | Path, b_path: str | Path) -> Comparison:
    a, b = load(a_path), load(b_path)
    for key in ("device", "gpu"):
        if a["env"].get(key) != b["env"].get(key):
            raise EvokernelError(
                f"cannot compare runs on different hardware: {a_path} has {key} "
                f"{a['env'].get(key)!r}, {b_path} has {b['env'].get(key)!r}"
            )
    rows_a, rows_b = _rows(a), _rows(b)
    keys = list(rows_a) + [k for k in rows_b if k not in rows_a]
    ratios = []
    for system, position in keys:
        ra, rb = rows_a.get((system, position), {}), rows_b.get((system, position), {})
        ta, tb = ra.get("tok_s"), rb.get("tok_s")
        ratios.append(
            Ratio(
                system=system,
                position=position,
                tok_s_a=ta,
                tok_s_b=tb,
                ratio=round(tb / ta, 4) if ta and tb else None,
                pct_floor_a=ra.get("pct_floor"),
                pct_floor_b=rb.get("pct_floor"),
            )
        )
    return Comparison(str(a_path), str(b_path), a["env"]["device"], a["env"].get("gpu"), ratios)


def _rows(doc: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["system"], r["position"]): r for r in doc["results"]}
