"""The worker side of the timed phase (worker/timing.py), on the CPU."""

from __future__ import annotations

from collections import Counter
from typing import Any

from evokernel.evaluate.options import EvalOptions
from evokernel.evaluate.plan import public_scenarios, timing_plan
from evokernel.evaluate.worker.calls import Caller
from evokernel.evaluate.worker.guards import Guards
from evokernel.evaluate.worker.timing import TimedScenario
from evokernel.tasks import get_task


def test_each_baseline_is_first_called_when_the_inputs_are_built_not_in_the_timed_rounds() -> None:
    """A library may set up per shape on its first call (cuDNN's SDPA: most of a second); that
    call belongs to `Prepare` (shared lock), not to the exclusive hold. The candidate is not
    called there: its first calls on these shapes were its correctness checks."""
    task = get_task("decode_linear")
    opts = EvalOptions(seed=5).resolved("cpu")
    scenario = public_scenarios(task, "cpu", opts)[0]
    plan = timing_plan(task, scenario, "cpu", opts, 5, 0, True)
    calls: Counter[str] = Counter()

    def counted(name: str, fn: Any) -> Any:
        def call(**inputs: Any) -> Any:
            calls[name] += 1
            return fn(**inputs)

        return call

    fns = {f"baseline:{k}": counted(k, v) for k, v in task.baselines(scenario).items()}
    fns["candidate"] = counted("candidate", lambda **x: task.reference(x))
    caller = Caller(Guards(False), "cpu", 2**30, None)
    timed = TimedScenario(task, scenario, plan.dtype, fns, caller, plan.request(), 0.0)
    baselines = [k.split(":", 1)[1] for k in fns if k.startswith("baseline:")]
    assert baselines and calls == Counter(dict.fromkeys(baselines, 1))  # built: one call each
    before = dict(calls)
    out = timed.run()
    assert out.reason is None
    rounds = len(plan.request().rounds)
    assert calls["candidate"] == rounds  # the rounds call everyone once per round
    assert all(calls[b] - before[b] == rounds for b in baselines)


def test_graph_timed_tasks_get_a_multiple_of_their_layers_in_copies_on_a_gpu_only() -> None:
    """A replay consumes `graph_layers` consecutive copies: with fewer copies a graph would use
    one copy twice (its second call seeing the first's writes), and with a count that is no
    multiple of the layers the graphs would start at every offset."""
    from evokernel.evaluate.plan import graph_copies

    layer, linear = get_task("decode_layer"), get_task("decode_linear")
    assert layer.graph_layers == 4 and linear.graph_layers == 0
    assert [graph_copies(n, layer, "cuda") for n in (1, 2, 4, 5, 9)] == [4, 4, 4, 8, 12]
    assert graph_copies(5, layer, "cpu") == 5  # the CPU times eagerly
    assert graph_copies(5, linear, "cuda") == 5
