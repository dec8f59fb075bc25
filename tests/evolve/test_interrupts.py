"""SIGINT and SIGTERM stop `evokernel evolve` cleanly: exit 130 / 143, the line to resume,
no traceback, no scratch directory left in the temporary directory, and the run resumes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROGRAM = "# EVOLVE-BLOCK-START\nX = 1\nY = 2\n# EVOLVE-BLOCK-END\n"
EVALUATOR = """import time


def evaluate(path):
    text = open(path).read()
    if "X = 1\\nY = 2" not in text:
        time.sleep(60)  # children are slow: the signal finds them running
    return {"combined_score": 1.0}
"""


def _seeded(run: Path) -> bool:
    try:
        with sqlite3.connect(f"file:{run / 'programs.sqlite'}?mode=ro", uri=True) as db:
            return bool(db.execute("SELECT 1 FROM programs WHERE id = 'seed'").fetchone())
    except sqlite3.Error:
        return False


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_search_cleanly(tmp_path, sig, code):
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "ev.py").write_text(EVALUATOR)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "evokernel", "evolve", "--device", "cpu", "--iterations", "6"]
    cmd += ["--program", str(tmp_path / "prog.py"), "--evaluator", str(tmp_path / "ev.py")]
    cmd += ["--out", str(run), "--config", str(tmp_path / "c.yaml")]
    (tmp_path / "c.yaml").write_text("evaluator:\n  workers: 2\n")
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while not _seeded(run) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(2.0)  # two children are being evaluated now
    assert any(scratch.iterdir()), "the children's evaluations hold scratch directories"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert f"resume with evokernel evolve --resume --out {run}" in err
    assert "Traceback" not in err and "Exception" not in err, err
    assert [p.name for p in scratch.iterdir() if p.is_dir()] == []
    state = subprocess.run(
        [sys.executable, "-m", "evokernel", "status", str(run), "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert state.returncode == 0 and '"finished": false' in state.stdout
