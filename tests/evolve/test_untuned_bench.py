"""The kernel-task bench without `# tune:` annotations: stripping keeps every value and the
program, leaves no knob, and gives the offline mutator constants to move."""

from __future__ import annotations

import pytest

from evokernel.bench.untuned_bench import strip_tune
from evokernel.evolve.mutators import edits
from evokernel.tasks import get_task
from evokernel.tasks.blocks import find_block, knob_values, parse_knobs


@pytest.mark.parametrize("task", ["decode_linear", "gqa_decode_attention"])
def test_stripping_tune_comments_keeps_the_values_and_leaves_no_knob(task):
    seed = get_task(task).seed_candidate.read_text()
    stripped = strip_tune(seed)
    assert "# tune:" not in stripped and parse_knobs(stripped) == []
    find_block(stripped)  # still one EVOLVE-BLOCK: a valid kernel candidate
    for name, value in knob_values(seed).items():
        assert f"{name} = {value!r}" in stripped
    assert edits.compiles(stripped) == ""
    assert edits.find_moves(stripped)["const"]
