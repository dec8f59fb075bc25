"""Honest candidates pass: both tasks' seeds on the CPU (correctness, every public and hidden
scenario, every CPU dtype), the CPU timing path labels its figures and claims no speedup, a
cache keyed on shapes is caught by the re-check of timed outputs, trivial candidates fail the
second task too, and the evaluator keeps working after crashes, hangs and memory hogs."""

from __future__ import annotations

import pytest
from eval_helpers import HONEST, HOSTILE, descendants

from evokernel.evaluate import EvalOptions, EvalResult, evaluate, evaluate_many
from evokernel.tasks import get_task


@pytest.mark.parametrize("task", ["gqa_decode_attention", "decode_linear"])
def test_seed_passes_on_cpu(task: str) -> None:
    seed = get_task(task).seed_candidate
    result = evaluate(task, seed, device="cpu", options=EvalOptions(seed=5, time=False))
    assert result.correct, result.reasons
    assert result.stage == "done"
    assert result.checks and all(c.passed for c in result.checks)
    assert any(c.hidden for c in result.checks)
    assert {c.dtype for c in result.checks} == {"float32", "float16"}
    assert EvalResult.from_json(result.to_json()) == result
    assert result.artifacts["seed"] == "5"
    assert descendants() == []


def test_cpu_timing_is_labelled_and_catches_a_shape_cache() -> None:
    task = get_task("gqa_decode_attention")
    options = EvalOptions(
        seed=3, scenarios=("b1_ctx16", "b1_ctx64"), hidden=False, static_check=False
    )
    honest, cacher = evaluate_many(
        task.name, [task.seed_candidate, HOSTILE / "cache_by_shape.py"], "cpu", options
    )
    assert honest.correct, honest.reasons
    assert honest.timing_label.startswith("cpu-interpreter")
    assert [s.name for s in honest.scenarios] == ["b1_ctx16", "b1_ctx64"]
    for s in honest.scenarios:
        assert s.speedup is None and s.speedup_ci is None and not s.win
        assert s.candidate.n == 2 and s.candidate.median_us > 0  # CPU default: 2 rounds
        assert set(s.baselines) == {"sdpa_masked", "sdpa_sliced"}
    assert EvalResult.from_json(honest.to_json()) == honest
    assert not cacher.correct
    assert cacher.reason_codes[0] == "timed-output-mismatch", cacher.reasons


def test_trivial_candidates_fail_decode_linear() -> None:
    names = ["returns_input", "returns_zeros", "returns_constant", "returns_empty"]
    files = [HOSTILE / f"linear_{n}.py" for n in names]
    results = evaluate_many("decode_linear", files, "cpu", EvalOptions(seed=2, time=False))
    expected = [{"output-shape", "mismatch"}, {"mismatch"}, {"mismatch"}, {"not-finite"}]
    for name, result, codes in zip(names, results, expected):
        assert not result.correct, name
        assert set(result.reason_codes) <= codes, (name, result.reasons)


def test_honest_candidate_passes_after_each_failure() -> None:
    options = EvalOptions(
        seed=4,
        time=False,
        hidden=False,
        scenarios=("b1_ctx64",),
        static_check=False,
        timeout_s=6.0,
        memory_mb=3072,
    )
    sequence = ["segfaults.py", "hangs.py", "hogs_memory.py"]
    honest = HONEST / "torch_attention.py"
    for name in sequence:
        bad = evaluate("gqa_decode_attention", HOSTILE / name, "cpu", options)
        assert not bad.correct, name
        good = evaluate("gqa_decode_attention", honest, "cpu", options)
        assert good.correct, (name, good.reasons)
        assert descendants() == []
