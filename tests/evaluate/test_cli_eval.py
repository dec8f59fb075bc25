"""`evokernel eval`: the table, the final JSON line, and the exit codes (0 / 1 / 2)."""

from __future__ import annotations

import json
import subprocess
import sys

from eval_helpers import HONEST, HOSTILE


def run(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "evokernel", "eval", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_correct_candidate_json_line() -> None:
    honest = str(HONEST / "torch_attention.py")
    proc = run("gqa_decode_attention", honest, "--device", "cpu", "--json", "--seed", "9",
               "--scenarios", "b1_ctx16,b3_ctx200", "--timeout", "120")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    data = json.loads(lines[-1])
    assert data["task"] == "gqa_decode_attention" and data["correct"] is True
    assert data["reasons"] == []
    assert [s["name"] for s in data["scenarios"]] == ["b1_ctx16", "b3_ctx200"]
    assert data["scenarios"][0]["speedup"] is None  # no speed claim on the CPU
    assert data["timing_label"].startswith("cpu-interpreter")
    assert "CORRECT" in proc.stdout and "b3_ctx200" in proc.stdout


def test_rejected_candidate_exits_1_with_reasons() -> None:
    proc = run("gqa_decode_attention", str(HOSTILE / "patches_allclose.py"), "--device", "cpu",
               "--json")  # fmt: skip
    assert proc.returncode == 1
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["correct"] is False and data["reasons"][0].startswith("static: ")
    assert "REJECTED" in proc.stdout


def test_bad_arguments_exit_2() -> None:
    honest = str(HONEST / "torch_attention.py")
    assert run("no_such_task", honest, "--device", "cpu").returncode == 2
    assert run("gqa_decode_attention", "/no/such/file.py", "--device", "cpu").returncode == 2
    proc = run("gqa_decode_attention", honest, "--device", "cpu", "--scenarios", "nope")
    assert proc.returncode == 2 and "nope" in proc.stderr
