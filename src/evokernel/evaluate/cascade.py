"""The cascade: a cheap screen before full timing, for a search that only keeps programs that
could enter the top of their island.

`EvalOptions.cascade = Cascade(scenarios=..., promote_above=x)`: every correctness check runs
as always (public and hidden scenarios, every dtype: the cascade never skips correctness); then
only the screen scenarios are timed. Their estimate is the geometric mean over the screen
scenarios of the speedup intervals' upper bounds: an optimistic look, so a program is cut only
when even its best case is below the bar. Below `promote_above`, the evaluation stops there:
`EvalResult.stage == "screened"`, `correct` true when every check passed, only the screen
scenarios timed, `artifacts["cascade"]` saying why in one line ("estimate 0.912 < 1.020
(...)", which the search quotes in its insight lines). Otherwise the other public scenarios are
timed too, exactly as in a full evaluation, and every timing check applies to them
(`artifacts["cascade"]` starts with "promoted"): a promoted program is a fully evaluated one,
so the cascade never lets a program into the top of an island on the screen's word.

The estimate is an optimistic look at the screen scenarios only, not a bound on the other
scenarios: a program slower on the screen but much faster elsewhere can be screened out. The
screen takes one scenario per regime so that the usual shapes of a task are represented.

`scenarios` () picks the task's default screen: the first public scenario of each regime
(e.g. short and long contexts, narrow and wide projections), at most two. On the CPU
interpreter there is no speedup, hence no estimate: every program is promoted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evokernel.errors import ConfigError
from evokernel.evaluate.result import ScenarioResult
from evokernel.tasks.base import Scenario

SCREEN_MAX = 2


@dataclass(frozen=True)
class Cascade:
    scenarios: tuple[str, ...] = ()
    promote_above: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scenarios", tuple(self.scenarios))
        if self.promote_above is not None and not math.isfinite(self.promote_above):
            raise ConfigError(f"Cascade.promote_above must be finite, got {self.promote_above}")


def screen_scenarios(cascade: Cascade, public: list[Scenario]) -> list[Scenario]:
    """The screen, in the order of `public` (names must be among them: a bad argument
    otherwise)."""
    if cascade.scenarios:
        known = {s.name for s in public}
        missing = [n for n in cascade.scenarios if n not in known]
        if missing:
            raise ConfigError(
                f"Cascade.scenarios: {', '.join(missing)} not among the public scenarios "
                f"({', '.join(known)})"
            )
        return [s for s in public if s.name in cascade.scenarios]
    chosen: dict[str, Scenario] = {}
    for s in public:
        chosen.setdefault(s.regime or "all", s)
    return list(chosen.values())[:SCREEN_MAX]


def estimate(results: list[ScenarioResult]) -> float | None:
    """Geometric mean of the speedup intervals' upper bounds; None without intervals (CPU)."""
    uppers = [r.speedup_ci[1] for r in results if r.speedup_ci is not None]
    if not uppers or len(uppers) < len(results):
        return None
    if any(u <= 0 for u in uppers):
        return 0.0
    return math.exp(sum(math.log(u) for u in uppers) / len(uppers))


def decide(cascade: Cascade, results: list[ScenarioResult]) -> tuple[bool, str]:
    """(promoted, the `artifacts["cascade"]` line)."""
    value = estimate(results)
    threshold = cascade.promote_above
    how = f"(geometric mean of the speedup upper bounds on {', '.join(r.name for r in results)})"
    if threshold is None:
        return True, "promoted: no threshold"
    if value is None:
        return True, "promoted: no speedup estimate on this device"
    if value >= threshold:
        return True, f"promoted: estimate {value:.3f} >= {threshold:.3f} {how}"
    return False, f"estimate {value:.3f} < {threshold:.3f} {how}"
