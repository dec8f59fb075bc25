"""The decode-layer task through the evaluator on the CPU: its seed passes a full `eval`
(correctness on every public and hidden scenario in float32 and float16, the timing path with
both baselines), an honest torch-ops layer passes, and each attack a layer candidate can newly
make is rejected with the right reason: skipping the layer's work, writing the token's K/V row
at the wrong position or besides the right one, not writing it, writing K without its norm and
RoPE, and answering from a cache keyed on the inputs' addresses.

The writes are in-place outputs (`Task.writes`): the worker judges `Task.observe`'s layout
[h_out | K rows | V rows] and reports a write outside the token's rows as `cache-write`. All
candidates here are torch-only files in layer_hostile/ (the static check passes them: the
defences are dynamic), evaluated in one `evaluate_many` batch with two workers.
"""

from __future__ import annotations

import pytest
from eval_helpers import HERE, descendants

from evokernel.evaluate import EvalOptions, evaluate, evaluate_many
from evokernel.evaluate.static import check_source
from evokernel.tasks import get_task

TASK = "decode_layer"
FILES = HERE / "layer_hostile"
HONEST = "honest_torch_layer.py"

# file -> reason codes allowed (the first one must be among them)
EXPECTED: dict[str, set[str]] = {
    "returns_h.py": {"mismatch"},
    "returns_h_plus_constant.py": {"mismatch"},
    "writes_next_row.py": {"cache-write"},
    "writes_row_zero.py": {"cache-write"},
    "writes_extra_row.py": {"cache-write"},
    "no_cache_write.py": {"mismatch"},
    "writes_raw_k.py": {"mismatch"},
    "cache_by_pointer.py": {"mismatch"},
}


@pytest.fixture(scope="module")
def batch():
    names = [*sorted(EXPECTED), HONEST]
    options = EvalOptions(static_check=False, time=False, seed=11, timeout_s=60.0)
    results = evaluate_many(TASK, [FILES / n for n in names], "cpu", options, workers=2)
    return dict(zip(names, results))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rejected(batch, name: str) -> None:
    result = batch[name]
    allowed = EXPECTED[name]
    assert not result.correct, f"{name} passed"
    assert result.stage == "correctness"
    assert result.reason_codes[0] in allowed, (name, result.reasons)
    assert set(result.reason_codes) <= allowed, (name, result.reasons)


def test_reasons_say_what_was_wrong(batch) -> None:
    late = batch["writes_next_row.py"].reasons[0]
    assert "k_cache" in late and "offset +1 from its token's row" in late, late
    extra = batch["writes_extra_row.py"].reasons[0]
    assert "offset -1 from its token's row" in extra, extra
    assert any("row 0" in r for r in batch["writes_row_zero.py"].reasons)
    pointer = batch["cache_by_pointer.py"].reasons
    assert all("after perturb" in r for r in pointer), pointer  # repeated calls were right


def test_honest_torch_layer_passes(batch) -> None:
    result = batch[HONEST]
    assert result.correct, result.reasons
    assert any(c.hidden for c in result.checks)
    assert {c.dtype for c in result.checks} == {"float32", "float16"}
    assert descendants() == []


@pytest.mark.parametrize("name", [*sorted(EXPECTED), HONEST])
def test_attacks_pass_the_static_check(name: str) -> None:
    assert check_source((FILES / name).read_text()) == []


@pytest.mark.slow
def test_seed_passes_a_full_cpu_eval() -> None:
    task = get_task(TASK)
    result = evaluate(TASK, task.seed_candidate, "cpu", EvalOptions(seed=5))
    assert result.correct, result.reasons
    assert result.stage == "done"
    assert all(c.passed for c in result.checks)
    assert any(c.hidden for c in result.checks)
    assert {c.dtype for c in result.checks} == {"float32", "float16"}
    assert result.timing_label.startswith("cpu-interpreter")
    assert [s.name for s in result.scenarios] == [s.name for s in task.scenarios("cpu")]
    for s in result.scenarios:
        assert set(s.baselines) == {"engine", "torch"}
        assert s.speedup is None and not s.win  # the interpreter makes no speed claim
    assert descendants() == []
