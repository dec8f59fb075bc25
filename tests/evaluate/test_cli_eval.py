"""`evokernel eval`: the table, the final JSON line, the exit codes (0 / 1 / 2), one line for
each bad input, and nothing left behind by an interrupt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from eval_helpers import HONEST, HOSTILE, marked_copy, marked_processes


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


def test_a_directory_or_fifo_is_named_for_what_it_is(tmp_path: Path) -> None:
    fifo = tmp_path / "cand.py"
    os.mkfifo(fifo)  # opening it would block until a writer comes: it must never be opened
    for path, kind in ((fifo, "a FIFO"), (tmp_path, "a directory")):
        proc = run("gqa_decode_attention", str(path), "--device", "cpu")
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
        assert kind in lines[0] and "not found" not in lines[0]


def test_a_syntax_error_without_the_static_check_names_the_candidate_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\n\ndef attention(q, k_cache, v_cache, seq_lens, scale):\n"
                   "    return (q\n")  # fmt: skip
    proc = run("gqa_decode_attention", str(bad), "--device", "cpu", "--no-static", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["reasons"][0].startswith("load: SyntaxError at line 5 of the candidate"), data
    assert "return (q" in data["reasons"][0]


def _default_interrupt() -> None:
    """In the child: SIGINT as a terminal would deliver it. A shell starts background jobs
    with SIGINT ignored, and Python keeps an ignored SIGINT ignored, so a suite run in the
    background would otherwise send a signal the CLI never sees."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_leaves_nothing_behind(tmp_path: Path, sig: signal.Signals) -> None:
    private = tmp_path / "tmp"
    private.mkdir()
    candidate, token = marked_copy(HOSTILE / "hangs.py", tmp_path)
    cmd = [sys.executable, "-m", "evokernel", "eval", "gqa_decode_attention", str(candidate),
           "--device", "cpu", "--no-static", "--no-time"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env={**os.environ, "TMPDIR": str(private)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=_default_interrupt,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not marked_processes(token):  # the candidate is running (and has its grandchild)
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        assert [p.name for p in private.iterdir() if p.name.startswith("evokernel-eval-")]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig], err
        assert "Traceback" not in err
        assert [p.name for p in private.iterdir() if p.name.startswith("evokernel-")] == []
        assert marked_processes(token) == []
    finally:
        if proc.poll() is None:  # a failed check must not leave the CLI running
            proc.kill()
            proc.wait()
