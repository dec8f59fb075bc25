"""`evokernel bench eval`: honest programs from the declared knob spaces, evaluated as the
search evaluates them, with evaluations per minute, phases and false rejections."""

from __future__ import annotations

import json
from pathlib import Path

from evokernel.bench.eval_bench import (
    EvalBenchOptions,
    Program,
    format_table,
    programs_for,
    run_eval_bench,
    summarize,
    write,
)
from evokernel.evaluate import EvalOptions
from evokernel.evaluate.result import EvalResult

TASK = "gqa_decode_attention"


def test_the_programs_are_fixed_and_evenly_spaced_over_the_knob_space() -> None:
    four = programs_for("decode_linear", 4)
    assert [p.index for p in four] == [0, 16, 31, 47]
    assert len({p.code for p in four}) == 4
    assert four == programs_for("decode_linear", 4)  # the same ones every time
    everything = programs_for("decode_linear", 0)
    assert len(everything) == 48 and everything[47].knobs == four[3].knobs


def test_a_fixed_set_goes_through_the_evaluator(tmp_path: Path) -> None:
    options = EvalOptions(seed=4, time=False, hidden=False, input_sets=1, scenarios=("b1_ctx16",))
    opts = EvalBenchOptions(device="cpu", tasks=(TASK,), programs=2, workers=2, options=options)
    lines: list[str] = []
    doc = run_eval_bench(opts, progress=lines.append)
    total = doc["total"]
    assert total["evaluations"] == 2 and total["not_started"] == 0
    assert total["false_rejections"] == 0, total["rejected"]
    assert total["evals_per_min"] > 0 and total["phases_s"]["correctness"] > 0
    assert doc["tasks"][TASK]["knob_space"] == 54 and len(lines) == 2
    write(doc, tmp_path / "b.json")
    assert json.loads((tmp_path / "b.json").read_text())["kind"] == "evokernel-bench-eval"
    table = format_table(doc)
    assert "false rej" in table and "total" in table


def test_every_rejection_is_counted_with_its_program() -> None:
    program = Program(TASK, 5, {"BLOCK_N": 32}, "code")
    result = EvalResult(
        task=TASK, candidate="x", correct=False, reasons=["timer-mismatch: s: ..."],
        stage="timing", device=None, timing_label="", wall_s=3.0,
        artifacts={"phases": json.dumps({"startup": 1.0, "timing_held": 0.5})},
    )  # fmt: skip
    figures = summarize([(program, result)], wall_s=30.0, planned=3)
    assert figures["false_rejections"] == 1 and figures["not_started"] == 2
    assert figures["rejected"][0]["knobs"] == {"BLOCK_N": 32}
    assert figures["evals_per_min"] == 2.0 and figures["gpu_held_s"] == 0.5
