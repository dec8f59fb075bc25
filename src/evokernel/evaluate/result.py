"""Typed results of one evaluation. Everything the search and the CLI read comes from here;
nothing parses free text.

A reason is one line, `"<code>: <detail>"`, where `<code>` is one of reasons.py's
`REASON_CODES`. Tests and the search match on the code; people read the detail.
`EvalResult.correct` is True exactly when `reasons` is empty.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from evokernel.reasons import reason_code


@dataclass
class TimingStats:
    """Per-call device times of one implementation in one scenario, after IQR filtering."""

    median_us: float
    p5_us: float
    p95_us: float
    n: int
    outliers_dropped: int


@dataclass
class CheckRecord:
    """One correctness comparison against the reference."""

    scenario: str
    hidden: bool
    dtype: str
    rel_l2: float | None
    max_abs_rel: float | None
    passed: bool
    detail: str = ""


@dataclass
class ScenarioResult:
    """Timing of one public scenario: candidate vs baselines, measured interleaved."""

    name: str
    regime: str
    params: dict[str, Any]
    dtype: str
    candidate: TimingStats
    baselines: dict[str, TimingStats]
    baseline: str  # the fastest baseline by median: the speedup is against this one
    speedup: float | None  # median of paired ratios baseline/candidate
    speedup_ci: tuple[float, float] | None  # bootstrap 95% interval of that median
    bytes_moved: int
    achieved_gbps: float
    roofline_us: float  # bytes_moved / measured copy bandwidth
    pct_roofline: float  # roofline_us / candidate median, in percent
    host_event_ratio: float  # median synchronized host time / median event time
    flags: list[str] = field(default_factory=list)  # e.g. "beyond-roofline"

    @property
    def win(self) -> bool:
        """A win needs the interval's lower bound above 1 and no flag."""
        return bool(self.speedup_ci and self.speedup_ci[0] > 1.0 and not self.flags)


@dataclass
class DeviceInfo:
    kind: str  # "cuda" | "cpu"
    name: str
    torch: str
    triton: str
    driver: str = ""
    sm_count: int = 0
    l2_bytes: int = 0
    copy_gbps: float = 0.0  # measured read+write bandwidth of a large device copy
    clocks: str = ""


@dataclass
class EvalResult:
    task: str
    candidate: str  # path, or "sha256:<digest>" for in-memory sources
    correct: bool
    reasons: list[str]
    stage: str  # last stage reached: static | load | correctness | timing | screened | done
    device: DeviceInfo | None
    timing_label: str  # "cuda-events" | "cpu-interpreter (correctness only, no speed claim)"
    checks: list[CheckRecord] = field(default_factory=list)
    scenarios: list[ScenarioResult] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)  # stderr tail, compiler, profiler
    wall_s: float = 0.0

    @property
    def reason_codes(self) -> list[str]:
        return [reason_code(r) for r in self.reasons]

    def scenario(self, name: str) -> ScenarioResult | None:
        return next((s for s in self.scenarios if s.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalResult:
        def stats(x: dict[str, Any]) -> TimingStats:
            return TimingStats(**x)

        scenarios = []
        for s in d.get("scenarios", []):
            s = dict(s)
            s["candidate"] = stats(s["candidate"])
            s["baselines"] = {k: stats(v) for k, v in s["baselines"].items()}
            if s.get("speedup_ci") is not None:
                s["speedup_ci"] = tuple(s["speedup_ci"])
            scenarios.append(ScenarioResult(**s))
        dev = d.get("device")
        return cls(
            task=d["task"],
            candidate=d["candidate"],
            correct=d["correct"],
            reasons=list(d["reasons"]),
            stage=d["stage"],
            device=DeviceInfo(**dev) if dev else None,
            timing_label=d["timing_label"],
            checks=[CheckRecord(**c) for c in d.get("checks", [])],
            scenarios=scenarios,
            artifacts=dict(d.get("artifacts", {})),
            wall_s=d.get("wall_s", 0.0),
        )

    @classmethod
    def from_json(cls, text: str) -> EvalResult:
        return cls.from_dict(json.loads(text))
