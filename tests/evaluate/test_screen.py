"""The evaluator's side of the cascade: a screen never skips a correctness check, a promoted
program is timed and checked on every public scenario like any other, and a screened one says
why in one line. The screened path itself needs real speedups (test_gpu.py)."""

from __future__ import annotations

import dataclasses

import pytest
from eval_helpers import HONEST, HOSTILE

from evokernel.errors import ConfigError
from evokernel.evaluate import Cascade, EvalOptions, evaluate
from evokernel.evaluate.cascade import decide, screen_scenarios
from evokernel.evaluate.result import ScenarioResult, TimingStats
from evokernel.evolve.cascade import is_screened
from evokernel.tasks import get_task

TASK = "gqa_decode_attention"
SCREEN = ("b1_ctx16",)


def _options(**changes: object) -> EvalOptions:
    fields: dict[str, object] = dict(
        seed=3, input_sets=1, scenarios=("b1_ctx16", "b1_ctx64"), memory_mb=3000,
        cascade=Cascade(scenarios=SCREEN, promote_above=1e9),
    )  # fmt: skip
    fields.update(changes)
    return EvalOptions(**fields)  # type: ignore[arg-type]


def test_a_screen_never_skips_correctness() -> None:
    """Wrong only on the hidden scenarios (no multiple of a tile): whatever the screen and its
    threshold, the program fails, before any timing."""
    result = evaluate(TASK, HOSTILE / "tile_aligned_only.py", "cpu", _options(time=True))
    assert not result.correct and result.stage == "correctness", result.reasons
    assert result.scenarios == [] and "cascade" not in result.artifacts


def test_a_promoted_program_is_timed_on_every_public_scenario() -> None:
    """The CPU interpreter gives no speedup estimate: every program is promoted and timed (and
    its timed outputs re-checked) on the other public scenarios too."""
    result = evaluate(TASK, HONEST / "torch_attention.py", "cpu", _options())
    assert result.correct and result.stage == "done", result.reasons
    assert [s.name for s in result.scenarios] == ["b1_ctx16", "b1_ctx64"]
    assert result.artifacts["cascade"] == "promoted: no speedup estimate on this device"


def _figures(name: str, upper: float) -> ScenarioResult:
    stats = TimingStats(10.0, 9.0, 11.0, 20, 0)
    return ScenarioResult(
        name=name, regime="short", params={}, dtype="bfloat16", candidate=stats,
        baselines={"b": stats}, baseline="b", speedup=upper * 0.9,
        speedup_ci=(upper * 0.8, upper), bytes_moved=1, achieved_gbps=0.0, roofline_us=0.0,
        pct_roofline=0.0, host_event_ratio=1.0, flags=[],
    )  # fmt: skip


def test_the_screen_estimate_is_the_geometric_mean_of_upper_bounds() -> None:
    screen = [_figures("a", 0.81), _figures("b", 1.0)]  # geometric mean 0.9
    promoted, line = decide(Cascade(promote_above=0.95), screen)
    assert not promoted
    assert line == ("estimate 0.900 < 0.950 (geometric mean of the speedup upper bounds on a, b)")
    promoted, line = decide(Cascade(promote_above=0.9), screen)
    assert promoted and line.startswith("promoted: estimate 0.900 >= 0.900")
    assert decide(Cascade(promote_above=None), screen) == (True, "promoted: no threshold")


def test_the_default_screen_takes_one_public_scenario_per_regime() -> None:
    task = get_task("decode_linear")
    public = task.scenarios("cuda")
    chosen = screen_scenarios(Cascade(), public)
    assert [s.regime for s in chosen] == ["wide", "narrow"]  # the first of each, in order
    assert chosen == [next(s for s in public if s.regime == r) for r in ("wide", "narrow")]
    with pytest.raises(ConfigError, match="nope not among the public scenarios"):
        screen_scenarios(Cascade(scenarios=("nope",)), public)
    with pytest.raises(ConfigError):
        Cascade(promote_above=float("inf"))
    with pytest.raises(ConfigError):  # a screen scenario outside the chosen public ones
        evaluate(TASK, HONEST / "torch_attention.py", "cpu", _options(scenarios=("b1_ctx64",)))


def test_the_search_reads_a_screened_result_by_its_stage() -> None:
    """The controller's contract (evolve/cascade.py): correct and stage "screened"."""
    result = evaluate(TASK, HONEST / "torch_attention.py", "cpu", _options(time=False))
    assert result.correct and not is_screened(result)
    assert is_screened(dataclasses.replace(result, stage="screened"))
