"""`evokernel bench eval` interrupted: exit 130 (SIGINT) or 143 (SIGTERM), one line, no thread
traceback, and no scratch directory left behind, whenever the signal comes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest


@pytest.mark.parametrize(
    ("sig", "code", "after_s"),
    [(signal.SIGINT, 130, 3.0), (signal.SIGTERM, 143, 5.0), (signal.SIGINT, 130, 8.0)],
)
def test_an_interrupted_bench_stops_cleanly(tmp_path, sig, code, after_s):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    cmd = [sys.executable, "-m", "evokernel", "bench", "eval", "--device", "cpu"]
    cmd += ["--tasks", "decode_linear", "--programs", "3", "--workers", "2"]
    cmd += ["--out", str(tmp_path / "bench.json")]
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(after_s)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err and "Exception" not in err, err
    assert err.strip().splitlines()[-1].startswith(("interrupted", "terminated"))
    assert [p.name for p in scratch.iterdir() if p.is_dir()] == []
