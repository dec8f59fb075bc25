"""The library entry points: argument errors raise, candidate faults never do."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_helpers import HONEST, descendants

from evokernel.errors import ConfigError, TaskError
from evokernel.evaluate import EvalOptions, evaluate, evaluate_many


def test_bad_arguments_raise(tmp_path: Path) -> None:
    honest = HONEST / "torch_attention.py"
    with pytest.raises(TaskError):
        evaluate("no_such_task", honest, device="cpu")
    with pytest.raises(TaskError):
        evaluate("gqa_decode_attention", tmp_path / "missing.py", device="cpu")
    with pytest.raises(TaskError):
        evaluate("gqa_decode_attention", honest, "cpu", EvalOptions(scenarios=("nope",)))
    with pytest.raises(ConfigError):
        EvalOptions(timeout_s=0)
    with pytest.raises(ConfigError):
        EvalOptions(reps=0)


def test_source_text_is_a_candidate() -> None:
    source = "import os\n# EVOLVE-BLOCK-START\nX = 1\n# EVOLVE-BLOCK-END\n"
    result = evaluate("gqa_decode_attention", source, device="cpu")
    assert result.candidate.startswith("sha256:")
    assert result.stage == "static" and result.reason_codes == ["static"]


def test_budget_leaves_candidates_unevaluated() -> None:
    honest = HONEST / "torch_attention.py"
    results = evaluate_many(
        "gqa_decode_attention", [honest, honest], "cpu", EvalOptions(), workers=1, budget_s=0
    )
    assert [r.reason_codes for r in results] == [["budget"], ["budget"]]
    assert descendants() == []
