"""The search benchmark's CPU smoke mode: both arms run, the JSON document is written."""

from __future__ import annotations

import json

import pytest

from evokernel.bench import evolve_bench

pytestmark = pytest.mark.slow


def test_cpu_smoke(tmp_path, capsys):
    args = ["--device", "cpu", "--out", str(tmp_path), "--tasks", "decode_linear"]
    assert evolve_bench.main([*args, "--evals", "2", "--exhaustive-limit", "1"]) == 0
    stdout = capsys.readouterr().out
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report == json.loads((tmp_path / "evolve_bench.json").read_text())
    (task,) = report["tasks"]
    assert task["knob_space"] == 48
    assert task["offline"]["evaluations"] == 2 and task["offline"]["valid"] == 2
    assert task["exhaustive"]["evaluations"] == 1 and task["exhaustive"]["valid"] == 1
    assert task["offline_pct_of_exhaustive"] == 100.0
    assert task["goal"] == "n/a"  # correctness only on the CPU, and the sweep was capped
    assert "correctness only" in stdout
    assert (tmp_path / "evolve_runs" / "decode_linear" / "programs.sqlite").exists()
    assert report["table"][0].startswith("evolve decode_linear: offline 1.0000 = 100.0000%")
    # every evaluated program is recorded (the landscape a search can be replayed on)
    for arm in ("offline", "exhaustive"):
        programs = task[arm]["programs"]
        assert len(programs) == task[arm]["evaluations"]
        assert all(
            p["fitness"] == 1.0
            and set(p["knobs"]) == {"BLOCK_N", "BLOCK_K", "NUM_WARPS", "SPLIT_K"}
            for p in programs
        )
