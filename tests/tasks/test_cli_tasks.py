"""`evokernel tasks [NAME] [--json]`."""

from __future__ import annotations

import json

from evokernel.cli import main


def test_lists_every_task_with_interface_scenarios_and_knobs(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    for text in (
        "gqa_decode_attention",
        "def attention(q, k_cache, v_cache, seq_lens, scale):",
        "decode_linear",
        "def linear(x, weight):",
        "b1_ctx65536",
        "lm_head_m1",
        "DIRECT_MAX=256 of {128, 256, 512}",
        "SPLIT_K=1 of {1, 2, 4, 8}",
        "sdpa_sliced",
        "F.linear",
    ):
        assert text in out, text
    assert "hidden_" not in out  # hidden shapes are counted, never shown


def test_json_ends_stdout_with_one_line(capsys):
    assert main(["tasks", "gqa_decode_attention", "--json"]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (info,) = data["tasks"]
    assert info["name"] == "gqa_decode_attention" and info["entry_point"] == "attention"
    assert info["dtypes"] == {"cuda": ["bfloat16", "float16"], "cpu": ["float32", "float16"]}
    assert info["tolerances"]["float32"] == {"rel_l2": 1e-5, "max_abs_rel": 1e-5}
    assert info["knob_space"] == 54 and [k["name"] for k in info["knobs"]][-1] == "DIRECT_MAX"
    cuda = {s["name"]: s for s in info["scenarios"]["cuda"]}
    assert cuda["b1_ctx4096"]["regime"] == "long" and cuda["b1_ctx128"]["regime"] == "short"
    assert cuda["b1_ctx1024"]["rotating_bytes"] == 2 * 1024 * 8 * 128 * 2
    assert cuda["b8_ctx1024"]["baselines"] == ["sdpa_masked", "sdpa_sliced"]
    assert info["hidden_per_draw"]["cuda"] >= 8


def test_unknown_task_is_a_one_line_error(capsys):
    assert main(["tasks", "nope"]) == 2
    assert "unknown task 'nope'" in capsys.readouterr().err
