"""Run directories for the report tests, built once per test session and only when asked for.

Real `evokernel evolve` runs on the CPU (a generic OpenEvolve-style task: the cheapest real
run): a finished run with exceptions, crashes and timeouts among its programs, a run whose seed
fails, a run of the seed only, and a run stopped and resumed after a pause. `timed_run` adds a
real search on a problem with scripted GPU-like results (speedups, phases, LLM usage). Then
hand-edited copies: non-finite and missing figures with an evicted parent, and a synthetic
run of thousands of programs.
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import subprocess
import sys
import time
from functools import cached_property
from pathlib import Path

from timed_run import timed_run

PROGRAM = '''"""Toy program: the evaluator scores value(); the best is A=4, B=1."""

# EVOLVE-BLOCK-START
A = 1  # tune: 1, 2, 3, 4, 5
B = 3  # tune: 0, 1, 2, 3
# EVOLVE-BLOCK-END


def value():
    return -((A - 4) ** 2) - (B - 1) ** 2
'''

EVALUATOR = """import importlib.util
import os
import signal
import time


def evaluate(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.A == 5:
        raise RuntimeError("A = 5 breaks the toy </pre></script><b>not bold</b>")
    if module.B == 0 and module.A % 2:
        time.sleep(60)  # past evaluator.timeout_s: a timeout
    if module.B == 0:
        os.kill(os.getpid(), signal.SIGKILL)  # a crash
    return {"combined_score": float(module.value()), "B": module.B, "spread": float("nan")}
"""

CONFIG = """islands:
  count: 2
evaluator:
  timeout_s: 2
mutators:
  offline:
    jump_prob: 0.6
"""


def evolve(files: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "evokernel", "evolve", "--program", str(files / "prog.py")]
    cmd += ["--evaluator", str(files / "ev.py"), "--out", str(out), "--device", "cpu"]
    return subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=600)


def db_ids(run: Path) -> list[str]:
    """Every program id of a run, read straight from its SQLite file."""
    conn = sqlite3.connect(f"file:{run / 'programs.sqlite'}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT id FROM programs ORDER BY rowid")]
    finally:
        conn.close()


class Runs:
    def __init__(self, root: Path):
        self.root = root
        self.files = root / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        (self.files / "prog.py").write_text(PROGRAM)
        (self.files / "ev.py").write_text(EVALUATOR)
        (self.files / "c.yaml").write_text(CONFIG)
        (self.files / "bad_seed.py").write_text(PROGRAM.replace("A = 1 ", "A = 5 "))

    def _evolve(self, name: str, *extra: str, ok: bool = True) -> Path:
        out = self.root / name
        done = evolve(self.files, out, "--config", str(self.files / "c.yaml"), *extra)
        assert (done.returncode == 0) == ok, done.stdout + done.stderr
        return out

    @cached_property
    def generic(self) -> Path:
        return self._evolve("generic", "--iterations", "14", "--seed", "5")

    @cached_property
    def failed(self) -> Path:
        out = self.root / "failed"
        cmd = [sys.executable, "-m", "evokernel", "evolve", "--program"]
        cmd += [str(self.files / "bad_seed.py"), "--evaluator", str(self.files / "ev.py")]
        cmd += ["--out", str(out), "--device", "cpu", "--iterations", "4"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 2 and "seed program is not correct" in done.stderr, done.stderr
        return out

    @cached_property
    def empty(self) -> Path:
        return self._evolve("empty", "--iterations", "0")

    @cached_property
    def resumed(self) -> Path:
        out = self._evolve("resumed", "--iterations", "4", "--seed", "2")
        time.sleep(2.5)  # a pause between the sessions, which time axes must leave out
        again = evolve(self.files, out, "--resume", "--iterations", "8")
        assert again.returncode == 0, again.stdout + again.stderr
        return out

    @cached_property
    def timed(self) -> Path:
        return timed_run(self.root / "timed")

    @cached_property
    def broken(self) -> Path:
        """The timed run with non-finite and missing figures, an unreadable result, malformed
        phases and an evicted parent, as damaged or foreign databases hold them."""
        out = self.root / "broken"
        shutil.copytree(self.timed, out)
        conn = sqlite3.connect(out / "programs.sqlite")
        rows = conn.execute(
            "SELECT id, result FROM programs WHERE status = 'ok' AND result IS NOT NULL "
            "AND reused_from = '' AND iteration >= 0 ORDER BY rowid"
        ).fetchall()
        nan_id, inf_id, null_id, bad_id = (r[0] for r in rows[:4])
        doc = json.loads(rows[0][1])
        for s in doc["scenarios"]:
            s["speedup"], s["speedup_ci"], s["pct_roofline"] = math.nan, [math.nan, math.inf], None
        doc["artifacts"]["phases"] = "{not json"
        conn.execute("UPDATE programs SET result = ? WHERE id = ?", (json.dumps(doc), nan_id))
        regimes = json.dumps({"short": math.nan, "long": math.inf})
        conn.execute("UPDATE programs SET regimes = ? WHERE id = ?", (regimes, nan_id))
        conn.execute("UPDATE programs SET fitness = ? WHERE id = ?", (math.inf, inf_id))
        conn.execute("UPDATE programs SET fitness = NULL WHERE id = ?", (null_id,))
        conn.execute("UPDATE programs SET result = '{\"task\": 1' WHERE id = ?", (bad_id,))
        # Evict a parent: the first evaluated program that has children of its own.
        parent = conn.execute(
            "SELECT p.id FROM programs p WHERE p.iteration >= 0 AND p.status = 'ok' AND "
            "p.reused_from = '' AND p.id NOT IN (?, ?, ?, ?) AND EXISTS (SELECT 1 FROM programs c "
            "WHERE c.parent_ids LIKE '%\"' || p.id || '\"%') ORDER BY p.rowid LIMIT 1",
            (nan_id, inf_id, null_id, bad_id),
        ).fetchone()[0]
        conn.execute("DELETE FROM programs WHERE id = ?", (parent,))
        conn.commit()
        conn.close()
        self.evicted = parent
        return out

    @cached_property
    def large(self) -> Path:
        from large_run import large_run

        return large_run(self.root / "large", 3000)
