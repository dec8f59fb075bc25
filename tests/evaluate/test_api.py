"""The library entry points: argument errors raise, candidate faults never do."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_helpers import HONEST, descendants

from evokernel.errors import ConfigError, TaskError
from evokernel.evaluate import EvalOptions, evaluate, evaluate_many
from evokernel.evaluate.static import MAX_SOURCE_BYTES


def test_bad_arguments_raise(tmp_path: Path) -> None:
    honest = HONEST / "torch_attention.py"
    with pytest.raises(TaskError):
        evaluate("no_such_task", honest, device="cpu")
    with pytest.raises(TaskError):
        evaluate("gqa_decode_attention", tmp_path / "missing.py", device="cpu")
    huge = tmp_path / "huge.py"
    huge.write_bytes(b"x = 1\n" * (MAX_SOURCE_BYTES // 6 + 1))
    with pytest.raises(TaskError, match="the limit is 256 KiB"):
        evaluate("gqa_decode_attention", huge, device="cpu")
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


def test_sources_no_stage_can_take_are_rejected_with_the_pre_check_off_too() -> None:
    seed = (HONEST / "torch_attention.py").read_text()
    sources = [
        seed + "\n# " + "x" * MAX_SOURCE_BYTES + "\n",
        seed + "\nZ = '\ud800'\n",  # a lone surrogate: no UTF-8 for the worker
        seed + "\nZ = 1\0\n",
        # the worker's import would obey the declaration: the comment imports os under UTF-7
        "# coding: utf-7\n# +AAo-import os\n" + seed,
    ]
    for static in (True, False):
        options = EvalOptions(static_check=static)
        results = evaluate_many("gqa_decode_attention", sources, "cpu", options, workers=2)
        assert [r.stage for r in results] == ["static"] * 4
        assert all(r.reason_codes == ["static"] for r in results)
    assert descendants() == []


def test_a_source_the_parser_cannot_take_is_a_verdict_not_a_crash() -> None:
    seed = (HONEST / "torch_attention.py").read_text()
    deep = seed + "\nZ = a" + ".b" * 50_000 + "\n"
    result = evaluate("gqa_decode_attention", deep, device="cpu")
    assert result.stage == "static" and "syntax error" in result.reasons[0]


def test_budget_leaves_candidates_unevaluated() -> None:
    honest = HONEST / "torch_attention.py"
    results = evaluate_many(
        "gqa_decode_attention", [honest, honest], "cpu", EvalOptions(), workers=1, budget_s=0
    )
    assert [r.reason_codes for r in results] == [["budget"], ["budget"]]
    assert descendants() == []
