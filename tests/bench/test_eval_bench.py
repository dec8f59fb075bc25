"""`evokernel bench eval`: honest programs from the declared knob spaces, evaluated as the
search evaluates them, with evaluations per minute, phases and false rejections."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evokernel.bench.eval_bench import Program, format_table, programs_for, summarize
from evokernel.cli import main
from evokernel.evaluate.result import EvalResult

TASK = "gqa_decode_attention"


def test_the_programs_are_fixed_and_evenly_spaced_over_the_knob_space() -> None:
    four = programs_for("decode_linear", 4)
    assert [p.index for p in four] == [0, 16, 31, 47]
    assert len({p.code for p in four}) == 4
    assert four == programs_for("decode_linear", 4)  # the same ones every time
    everything = programs_for("decode_linear", 0)
    assert len(everything) == 48 and everything[47].knobs == four[3].knobs


def test_a_fixed_set_goes_through_the_evaluator_with_its_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["bench", "eval", "--device", "cpu", "--tasks", "decode_linear", "--programs", "2",
            "--workers", "2", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    stdout, stderr = capsys.readouterr()
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["evaluations"] == 2 and summary["false_rejections"] == 0, stdout
    assert summary["evals_per_min"] > 0 and summary["phases_s"]["correctness"] > 0
    doc = json.loads(out.read_text())
    assert doc["kind"] == "evokernel-bench-eval" and doc["workers"] == 2
    assert doc["options"]["reps"] == 2 and doc["options"]["cascade"] is None  # the defaults
    assert doc["complete"] is True
    task = doc["tasks"]["decode_linear"]
    assert task["knob_space"] == 48 and task["not_started"] == 0
    each = doc["evaluations"]  # one entry per evaluation, with its phases and timing figures
    assert [e["task"] for e in each] == ["decode_linear"] * 2 and all(e["correct"] for e in each)
    assert all(e["phases"]["correctness"] > 0 and "spin_us" in e["timing"] for e in each)
    assert all(len(e["median_us"]) == 6 and e["median_us"]["qkv_m1"][0] > 0 for e in each)
    assert stderr.count("decode_linear #") == 2  # one progress line per evaluation
    assert "false rej" in format_table(doc)


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


def test_each_evaluation_rewrites_the_figures_so_far(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupted bench leaves what it measured: the document after every evaluation."""
    import evokernel.evaluate as evaluate_api
    from evokernel.bench.eval_bench import EvalBenchOptions, run_eval_bench
    from evokernel.evaluate.options import EvalOptions

    def fake(task, code, device, options, gpu=0):  # type: ignore[no-untyped-def]
        return EvalResult(
            task=task, candidate="x", correct=True, reasons=[], stage="done", device=None,
            timing_label="", wall_s=1.0, artifacts={"phases": json.dumps({"load": 0.1})},
        )  # fmt: skip

    monkeypatch.setattr(evaluate_api, "evaluate", fake)
    seen: list[dict] = []
    opts = EvalBenchOptions(device="cpu", tasks=("decode_linear",), programs=3, workers=1,
                            max_minutes=0, options=EvalOptions(), command="test")  # fmt: skip
    doc = run_eval_bench(opts, checkpoint=seen.append)
    assert [d["total"]["evaluations"] for d in seen] == [1, 2, 3]
    assert all(d["complete"] is False for d in seen) and doc["complete"] is True
    assert seen[0]["tasks"]["decode_linear"]["not_started"] == 2
