"""The evaluator's cascade as the search drives it: screen first, evaluate in full only what
could enter the top of its island.

The evaluator's contract (`evokernel.evaluate.options`): `EvalOptions.cascade` is a
`Cascade(scenarios=(), promote_above=None)`. The evaluator runs every correctness check, times
the screen scenarios (`()`: its own choice) and, when the screen estimate (geometric mean of
the speedup intervals' upper bounds) is below `promote_above`, stops there: the result has
`stage == "screened"`, is correct when every check passed, times only the screen scenarios,
and says why in `artifacts["cascade"]`.

The search passes as `promote_above` the fitness a program must beat to enter the top of its
island: the fitness of the island's `selection.elite_pool`-th best distinct program, as the
iteration's proposal saw the island (so the threshold, like every choice, depends only on the
seed and the committed rows). An island with fewer programs than that screens nothing. Even
the screen's optimistic estimate (upper bounds) below the top's conservative fitness (lower
bounds) means the full evaluation could not have made the program a parent.

A screened program is stored with status "screened": evaluated, correct, never a parent, an
elite or a dispatch-table entry, and counted in the summary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evokernel.evaluate.result import EvalResult
    from evokernel.evolve.islands import Population

SCREENED = "screened"


def with_cascade(options: Any, scenarios: Sequence[str], promote_above: float | None) -> Any:
    """`options` (an EvalOptions) with the screen set, or unchanged when there is no
    threshold."""
    from evokernel.evaluate.cascade import Cascade

    if promote_above is None:
        return options
    screen = Cascade(scenarios=tuple(scenarios), promote_above=float(promote_above))
    return dataclasses.replace(options, cascade=screen)


def is_screened(result: EvalResult) -> bool:
    """A correct program the screen kept out of the full evaluation."""
    return result.correct and result.stage == SCREENED


def promote_threshold(pop: Population, island: int, elite_pool: int) -> float | None:
    """The fitness a new program of `island` must beat to enter the island's top
    `elite_pool` distinct programs; None while the top has room."""
    from evokernel.evolve.islands import distinct

    top = distinct(pop.ranked(island))[:elite_pool]
    if len(top) < elite_pool or top[-1].fitness is None:
        return None
    return float(top[-1].fitness)
