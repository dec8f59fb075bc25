"""A real `evokernel evolve` (kernel task, offline mutator, CPU interpreter) killed with
SIGKILL mid-run, then `--resume`d: nothing committed before the kill is lost or changed, and
the run completes to its target."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from evokernel.tasks import blocks, get_task

pytestmark = pytest.mark.slow


def _start_program() -> str:
    """The task's seed pinned to one pass (DIRECT_MAX above every CPU cache length): every
    variant is quick under the interpreter."""
    seed = get_task("gqa_decode_attention").seed_candidate.read_text()
    direct = next(k for k in blocks.parse_knobs(seed) if k.name == "DIRECT_MAX")
    lines = seed.splitlines()
    lines[direct.line] = "DIRECT_MAX = 512  # tune: 512"
    return "\n".join(lines) + "\n"


def _rows(run_dir):
    from evokernel.evolve.database import Database

    db = Database(run_dir / "programs.sqlite", readonly=True)
    try:
        return {
            p.id: (p.code_hash, p.status, p.fitness, p.reused_from, db.result(p.id).to_json())
            for p in db.programs
            if p.status != "rejected"
        } | {p.id: (p.code_hash, p.status) for p in db.programs if p.status == "rejected"}
    finally:
        db.close()


def _iterations(rows):
    return sum(1 for pid in rows if pid.startswith("p") and "@" not in pid)


def test_sigkill_then_resume_loses_nothing(tmp_path):
    (tmp_path / "start.py").write_text(_start_program())
    (tmp_path / "c.yaml").write_text("islands:\n  count: 2\nevaluator:\n  timeout_s: 120\n")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "evokernel", "evolve", "--task", "gqa_decode_attention"]
    cmd += ["--program", str(tmp_path / "start.py"), "--config", str(tmp_path / "c.yaml")]
    cmd += ["--device", "cpu", "--iterations", "3", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 240
        before: dict = {}
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if (out / "programs.sqlite").exists():
                try:
                    before = _rows(out)
                except Exception:  # the database is being created
                    continue
                if _iterations(before) >= 1:
                    break
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = _rows(out)
    assert 1 <= _iterations(before) < 3

    status = subprocess.run(
        [sys.executable, "-m", "evokernel", "status", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    data = json.loads(status.stdout.strip().splitlines()[-1])
    assert not data["running"] and not data["finished"]
    assert data["iterations_done"] == _iterations(before) and data["iterations_target"] == 3

    again = subprocess.run(
        [sys.executable, "-m", "evokernel", "evolve", "--resume", "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["iterations_done"] == 3 and summary["finished"]
    after = _rows(out)
    for pid, row in before.items():
        assert after[pid] == row, f"{pid} changed or vanished across the resume"
    assert _iterations(after) == 3
    assert "correctness only" in again.stdout
    assert (out / "best.py").exists() and (out / "dispatch.json").exists()
