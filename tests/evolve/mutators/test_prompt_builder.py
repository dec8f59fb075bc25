"""Prompts: every section from the context, figures from the EvalResult, bounded size, the
EVOLVE-BLOCK never cut, deterministic, templates overridable."""

from __future__ import annotations

import json
import random

import pytest

from evokernel.evaluate.result import DeviceInfo, EvalResult, ScenarioResult, TimingStats
from evokernel.evolve.mutators.config import PromptConfig
from evokernel.evolve.prompts import PromptBuilder, clip, figures
from evokernel.evolve.types import MutationContext, ProgramView
from evokernel.tasks.blocks import find_block, set_knobs


def result(speedup: float = 1.25, artifacts: dict[str, str] | None = None) -> EvalResult:
    t = TimingStats(median_us=40.0, p5_us=39.0, p95_us=42.0, n=100, outliers_dropped=2)
    b = TimingStats(median_us=50.0, p5_us=49.0, p95_us=52.0, n=100, outliers_dropped=1)
    scen = ScenarioResult(
        name="b1_ctx4096",
        regime="long",
        params={"B": 1, "S": 4096},
        dtype="bfloat16",
        candidate=t,
        baselines={"sdpa": b},
        baseline="sdpa",
        speedup=speedup,
        speedup_ci=(1.2, 1.3),
        bytes_moved=16_777_216,
        achieved_gbps=419.4,
        roofline_us=5.6,
        pct_roofline=14.0,
        host_event_ratio=1.01,
        flags=[],
    )
    dev = DeviceInfo(
        "cuda",
        "NVIDIA H100 80GB HBM3",
        "2.5",
        "3.3",
        sm_count=132,
        l2_bytes=50 * 2**20,
        copy_gbps=2950.0,
    )
    return EvalResult(
        "toy",
        "sha256:x",
        True,
        [],
        "done",
        dev,
        "cuda-events",
        scenarios=[scen],
        artifacts=artifacts or {},
    )


def ctx(code: str, **kw) -> MutationContext:
    fields = dict(
        task_name="gqa_decode_attention",
        task_interface="def attention(q, k_cache, v_cache, seq_lens, scale): ...",
        task_description="One decode step of grouped-query attention.",
        device="cuda",
        hardware={},
        parent=ProgramView("p3", code, 1.2, True, 1, 4, "llm:diff", result=result()),
        inspirations=[],
        insights=[
            f"p{i} offline:knob (BLOCK_N 16 -> 32) vs p0: fitness 1.0 -> 1.{i}" for i in range(30)
        ],
        rng=random.Random(0),
        iteration=5,
    )
    fields.update(kw)
    return MutationContext(**fields)


def test_sections_and_figures(toy_source):
    c = ctx(toy_source, last_failure="mismatch: rel_l2 0.3 > 0.01")
    p = PromptBuilder().build(c, "diff")
    assert "expert GPU kernel engineer" in p.system and "# tune:" in p.system
    u = p.user
    for needle in (
        "## Task: gqa_decode_attention",
        "def attention(q, k_cache, v_cache, seq_lens, scale)",
        "NVIDIA H100 80GB HBM3",
        "132 SMs, L2 cache 50 MiB",
        "2950 GB/s",
        "id p3, generation 4, made by llm:diff, correct, fitness 1.200",
        "| b1_ctx4096 | long | B=1 S=4096 | 16777216 | 5.60 | 40.00 | sdpa 50.00 "
        "| 1.250 [1.200, 1.300] | 14.0% |  |",
        "mismatch: rel_l2 0.3 > 0.01",
        "<<<<<<< SEARCH",
    ):
        assert needle in u, needle
    assert find_block(toy_source).body(toy_source) in u
    assert u.count("offline:knob (BLOCK_N") == 16  # newest max_insights
    assert "fitness 1.0 -> 1.29" in u and "fitness 1.0 -> 1.13\n" not in u
    assert p.messages[0]["role"] == "system" and p.messages[1]["content"] == u
    assert PromptBuilder().build(c, "diff") == p


def test_modes(toy_source):
    other = ProgramView(
        "p8", set_knobs(toy_source, {"BLOCK": 128}), 1.4, True, 0, 2, "x", result=result(1.4)
    )
    b = PromptBuilder()
    assert "complete new EVOLVE-BLOCK" in b.build(ctx(toy_source), "rewrite").user
    xo = b.build(ctx(toy_source, inspirations=[other]), "crossover", other).user
    assert "A second correct program (id p8" in xo and "BLOCK = 128" in xo
    assert "Other programs from the search" not in xo  # p8 is not shown twice
    with pytest.raises(ValueError):
        b.build(ctx(toy_source), "crossover")
    with pytest.raises(ValueError):
        b.build(ctx(toy_source), "poem")


def test_incorrect_and_cpu_parent(toy_source):
    bad = EvalResult(
        "toy",
        "x",
        False,
        ["mismatch: rel_l2 0.5 > 0.01", "exception: boom"],
        "correctness",
        None,
        "cpu-interpreter (correctness only, no speed claim)",
    )
    parent = ProgramView("p1", toy_source, None, False, 0, 1, "llm:diff", result=bad)
    u = PromptBuilder().build(ctx(toy_source, parent=parent, device="cpu"), "diff").user
    assert "INCORRECT (stage correctness)" in u and "- exception: boom" in u
    assert "CPU interpreter" in u and "a modern NVIDIA GPU" in u
    assert figures(None) == "Not measured."


def test_artifacts_clipped_tail_for_stderr_head_for_profiler(toy_source):
    stderr = "\n".join(f"stderr line {i}" for i in range(2000))
    prof = "\n".join(f"kernel_{i} 10us" for i in range(2000))
    parent = ProgramView(
        "p3",
        toy_source,
        1.2,
        True,
        1,
        4,
        "x",
        result=result(artifacts={"stderr": stderr, "profiler": prof}),
    )
    u = (
        PromptBuilder(PromptConfig(max_artifact_chars=500))
        .build(ctx(toy_source, parent=parent), "diff")
        .user
    )
    assert "stderr line 1999" in u and "stderr line 5\n" not in u
    assert "kernel_0 10us" in u and "kernel_1999" not in u
    assert "more lines cut" in u


def test_profiler_kernel_list_shown_as_per_stage_breakdown(toy_source):
    listing = {
        "b1_ctx128": [
            {"name": "norm_gemv_kernel", "stream": 7, "us": 6.0},
            {"name": "attention_kernel", "stream": 7, "us": 2.0},
            {"name": "gemv_add_kernel", "stream": 7, "us": 3.0},
            {"name": "gemv_add_kernel", "stream": 7, "us": 5.0},
            {"name": "norm_gate_up_kernel", "stream": 7, "us": 4.0},
        ]
    }
    parent = ProgramView(
        "p3", toy_source, 1.2, True, 1, 4, "x",
        result=result(artifacts={"kernels": json.dumps(listing)}),
    )  # fmt: skip
    u = PromptBuilder(PromptConfig()).build(ctx(toy_source, parent=parent), "diff").user
    assert "per-stage device time" in u
    assert "b1_ctx128 (20.0 us in 5 GPU events)" in u
    lines = [ln.split() for ln in u.splitlines() if ln.startswith("  ") and " us " in ln]
    # summed per kernel, largest first, with its share of the call
    assert [ln[0] for ln in lines] == [
        "gemv_add_kernel", "norm_gemv_kernel", "norm_gate_up_kernel", "attention_kernel"
    ]  # fmt: skip
    assert lines[0][1:] == ["8.00", "us", "40%"]


def test_stage_breakdown_leaves_other_text_alone():
    from evokernel.evolve.prompts.stages import stage_breakdown

    assert stage_breakdown("not json") is None
    assert stage_breakdown('["a"]') is None
    assert stage_breakdown('{"s": [{"name": "k"}]}') is None


def test_size_bound_drops_inspirations_first_and_never_cuts_the_block(toy_source):
    big_fixed = "# fixed filler\n" * 3000 + toy_source
    insp = [
        ProgramView(
            f"q{i}",
            toy_source.replace("BLOCK_N = 16", f"BLOCK_N = 16  # v{i}"),
            1.1,
            True,
            0,
            1,
            "x",
            result=result(),
        )
        for i in range(20)
    ]
    cfg = PromptConfig(max_chars=9000, max_fixed_code_chars=4000)
    c = ctx(
        big_fixed,
        inspirations=insp,
        parent=ProgramView("p3", big_fixed, 1.2, True, 1, 4, "x", result=result()),
    )
    u = PromptBuilder(cfg).build(c, "diff").user
    assert len(u) <= 9000
    assert find_block(big_fixed).body(big_fixed) in u
    assert 0 < u.count("### id q") < 20 and "### id q0," in u  # the first ones are kept
    assert "more lines cut ...]" in u and u.count("fixed filler") < 200  # fixed code clipped
    tight = PromptBuilder(PromptConfig(max_chars=3000, max_fixed_code_chars=4000)).build(c, "diff")
    assert "### id q" not in tight.user and "(BLOCK_N 16 -> 32)" not in tight.user
    assert find_block(big_fixed).body(big_fixed) in tight.user
    roomy = PromptBuilder(PromptConfig(max_chars=60000)).build(c, "diff").user
    assert roomy.count("### id q") == 20 and len(roomy) <= 60000


def test_clip():
    text = "\n".join(str(i) for i in range(100))
    assert clip(text, 1000) == text
    head = clip(text, 20)
    assert head.startswith("0\n1\n") and head.endswith("more lines cut ...]")
    tail = clip(text, 20, "tail")
    assert tail.startswith("[...") and tail.endswith("98\n99")


def test_template_dir_overrides(toy_source, tmp_path):
    (tmp_path / "system.txt").write_text("Be a kernel wizard for $task_name.")
    (tmp_path / "diff.txt").write_text("DIFF PLEASE")
    p = PromptBuilder(PromptConfig(template_dir=str(tmp_path))).build(ctx(toy_source), "diff")
    assert p.system == "Be a kernel wizard for $task_name."
    assert p.user.endswith("DIFF PLEASE\n") and "## Task:" in p.user


def test_a_generic_evaluators_artifacts_and_system_message_reach_the_prompt():
    code = "X = 1\n\n\ndef value():\n    return X\n"  # no markers: the whole file evolves
    art = {"artifact:hint": "X should be larger", "metrics": '{"combined_score": 1.0}'}
    parent = ProgramView("p1", code, 1.0, True, 0, 1, "seed", result=result(artifacts=art))
    c = ctx(code, parent=parent, device="cpu")
    p = PromptBuilder(PromptConfig(system_message="Maximise value().")).build(c, "diff")
    assert p.system == "Maximise value()."
    assert "### hint" in p.user and "X should be larger" in p.user
    quiet = PromptBuilder(PromptConfig(include_artifacts=False)).build(c, "diff")
    assert "X should be larger" not in quiet.user
