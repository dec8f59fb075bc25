"""MAP-Elites features: where a program sits in its island's grid.

A feature is either
  * `regime:<name>`: the program's speedup in that regime of the task's public scenarios
    (interval lower bounds combined by `grid.regime_stat`), binned by `grid.bins`
    (bin i holds values in [bins[i-1], bins[i]); bin 0 is below bins[0], and an unmeasured
    regime lands there too), or
  * `knob:<NAME>`: the value of a knob the seed declares (`# tune:`), one bin per declared
    choice plus one "other" bin for a value outside them or a knob the program dropped, or
  * `metric:<name>`: a metric a generic evaluator reports, binned as OpenEvolve bins its
    `feature_dimensions`: `grid.metric_bins` equal bins over the range of the values seen so
    far (the rows committed before, plus this one), fixed when the row is committed (commits
    come in iteration order, so the cell is deterministic); a missing metric lands in bin 0.

`grid.features: auto` means the task's regimes when speedups are measured (cuda) and the
seed's first two declared knobs otherwise (cpu interpreter, generic tasks), so the grid always
separates something real. The grid itself is not stored: a cell's elite is the best program
ever placed in it (see `islands.py`), so an elite can only be displaced by a better program.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from evokernel.errors import ConfigError
from evokernel.evolve.config import GridConfig

# `evokernel.tasks.blocks` is imported inside the functions below: importing the tasks package
# loads torch, and the pure readers of a run (islands, summaries, status) import this module.


@dataclass(frozen=True)
class Feature:
    kind: str  # "regime" | "knob" | "metric"
    name: str
    choices: tuple[Any, ...] = ()  # knob features: the declared values
    bins: int = 0  # metric features: the number of bins

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True)
class FeatureSpace:
    features: tuple[Feature, ...]
    bins: tuple[float, ...]

    def sizes(self) -> tuple[int, ...]:
        return tuple(
            len(self.bins) + 1
            if f.kind == "regime"
            else f.bins
            if f.kind == "metric"
            else len(f.choices) + 1
            for f in self.features
        )

    def values(
        self, regimes: dict[str, float], code: str, metrics: dict[str, float] | None = None
    ) -> dict[str, Any]:
        """Raw feature values of a program (None where unmeasured or undeclared)."""
        knobs = _safe_knobs(code) if any(f.kind == "knob" for f in self.features) else {}
        out: dict[str, Any] = {}
        for f in self.features:
            if f.kind == "regime":
                out[f.key] = regimes.get(f.name)
            elif f.kind == "metric":
                out[f.key] = (metrics or {}).get(f.name)
            else:
                out[f.key] = knobs.get(f.name)
        return out

    def cell(
        self, values: dict[str, Any], ranges: dict[str, tuple[float, float]] | None = None
    ) -> tuple[int, ...]:
        """The grid cell of `values`; `ranges`: each metric feature's (min, max) so far."""
        cell = []
        for f in self.features:
            v = values.get(f.key)
            if f.kind == "regime":
                cell.append(0 if v is None else bisect.bisect_right(self.bins, float(v)))
            elif f.kind == "metric":
                lo, hi = (ranges or {}).get(f.key, (v, v)) if v is not None else (0.0, 0.0)
                cell.append(0 if v is None else metric_bin(float(v), lo, hi, f.bins))
            else:
                cell.append(f.choices.index(v) if v in f.choices else len(f.choices))
        return tuple(cell)

    def metric_keys(self) -> list[str]:
        return [f.key for f in self.features if f.kind == "metric"]


def metric_bin(value: float, lo: float, hi: float, bins: int) -> int:
    """OpenEvolve's binning: min-max scaled into `bins` equal bins (the middle when flat)."""
    lo, hi = min(lo, value), max(hi, value)
    scaled = 0.5 if hi == lo else (value - lo) / (hi - lo)
    return max(0, min(bins - 1, int(scaled * bins)))


def _safe_knobs(code: str) -> dict[str, Any]:
    from evokernel.tasks import blocks

    try:
        return blocks.knob_values(code)
    except blocks.BlockError:
        return {}


def resolve_features(
    grid: GridConfig, regimes: list[str], seed_code: str, timed: bool
) -> FeatureSpace:
    """The run's feature space. `regimes`: the task's public regimes in order (empty for a
    generic task); `timed`: whether speedups are measured (False on the CPU interpreter)."""
    from evokernel.tasks import blocks

    declared = {k.name: k for k in blocks.parse_knobs(seed_code)} if seed_code else {}
    if grid.features == "auto":
        if timed and regimes:
            specs = [f"regime:{r}" for r in regimes]
        else:
            specs = [f"knob:{name}" for name in list(declared)[:2]]
    else:
        specs = list(grid.features)
    features = []
    for spec in specs:
        kind, _, name = spec.partition(":")
        if kind == "metric":
            if timed or regimes:
                raise ConfigError(
                    f"grid.features: {spec!r}: metric features are for generic evaluators' "
                    "metrics; a kernel task has regimes and knobs"
                )
            features.append(Feature("metric", name, bins=grid.metric_bins_of(name)))
        elif kind == "regime":
            if name not in regimes:
                known = ", ".join(regimes) or "none (generic task)"
                raise ConfigError(f"grid.features: no regime {name!r} in this task ({known})")
            features.append(Feature("regime", name))
        else:
            if name not in declared:
                known = ", ".join(declared) or "none"
                raise ConfigError(f"grid.features: the seed declares no knob {name!r} ({known})")
            features.append(Feature("knob", name, declared[name].choices))
    return FeatureSpace(tuple(features), tuple(grid.bins))
