"""Generic (OpenEvolve-style) tasks end to end through the CLI: a toy program and evaluator,
each evaluation in an isolated process; determinism of two runs with one seed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROGRAM = '''"""Toy program: the evaluator scores value(); the best is A=4, B=1."""

# EVOLVE-BLOCK-START
A = 1  # tune: 1, 2, 3, 4, 5
B = 3  # tune: 0, 1, 2, 3
# EVOLVE-BLOCK-END


def value():
    return -((A - 4) ** 2) - (B - 1) ** 2
'''

EVALUATOR = """import importlib.util


def evaluate(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.A == 5:
        raise RuntimeError("A = 5 breaks the toy")
    if module.B == 0:
        return {"value": "none"}
    return {"combined_score": float(module.value()), "B": module.B}
"""


@pytest.fixture
def files(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "ev.py").write_text(EVALUATOR)
    return tmp_path


def _evolve(files, out, *extra):
    cmd = [sys.executable, "-m", "evokernel", "evolve", "--program", str(files / "prog.py")]
    cmd += ["--evaluator", str(files / "ev.py"), "--out", str(out), "--device", "cpu", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def _programs(run_dir):
    from evokernel.evolve.database import Database

    db = Database(run_dir / "programs.sqlite", readonly=True)
    try:
        return [p for p in db.programs]
    finally:
        db.close()


def test_generic_task_end_to_end_and_deterministic(files):
    cfg = files / "c.yaml"
    cfg.write_text("islands:\n  count: 2\nmutators:\n  offline:\n    jump_prob: 0.5\n")
    a = _evolve(
        files, files / "a", "--iterations", "10", "--seed", "4", "--json", "--config", str(cfg)
    )
    assert a.returncode == 0, a.stderr
    summary = json.loads(a.stdout.strip().splitlines()[-1])
    assert summary["iterations_done"] == 10
    assert summary["best"]["fitness"] > -9.0  # better than the seed's -(3^2) - 2^2 = -13
    assert summary["evaluated"] == summary["valid"] + summary["failed"]
    assert "combined_score" in a.stdout

    rows = _programs(files / "a")
    seed = next(p for p in rows if p.id == "seed")
    assert seed.fitness == -13.0
    failed = [p for p in rows if p.status == "failed"]
    for p in failed:
        assert p.reasons[0].startswith(("exception:", "no-result:")), p.reasons
        if "A = 5" in p.code:
            assert "A = 5 breaks the toy" in p.reasons[0]

    b = _evolve(files, files / "b", "--iterations", "10", "--seed", "4", "--config", str(cfg))
    assert b.returncode == 0, b.stderr
    sig = lambda rs: [(p.id, p.island, p.parent_ids, p.code_hash, p.fitness) for p in rs]
    order = lambda rs: sorted(rs, key=lambda p: (p.iteration, p.id))
    assert sig(order(rows)) == sig(order(_programs(files / "b")))


def test_generic_task_failures_are_reasons(files, tmp_path):
    from evokernel.evolve.config import config_from_dict
    from evokernel.evolve.generic import GenericProblem

    problem = GenericProblem.from_files(
        files / "prog.py", files / "ev.py", "cpu", config_from_dict({})
    )
    broken = problem.evaluate(PROGRAM.replace("A = 1 ", "A = 5 "))
    assert not broken.correct and broken.reasons[0].startswith("exception:")
    assert "A = 5 breaks the toy" in broken.reasons[0]
    missing = problem.evaluate(PROGRAM.replace("B = 3 ", "B = 0 "))
    assert not missing.correct and "no finite combined_score" in missing.reasons[0]
    good = problem.evaluate(PROGRAM)
    assert good.correct and problem.fitness(good) == -13.0


def test_cli_refuses_bad_invocations(files, tmp_path):
    out = _evolve(files, tmp_path / "x", "--iterations", "1", "--task", "gqa_decode_attention")
    assert out.returncode == 2 and "--evaluator is for generic tasks" in out.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    out = _evolve(files, tmp_path / "full", "--iterations", "1")
    assert out.returncode == 2 and "already exists; pass --resume" in out.stderr
    assert not (tmp_path / "full" / "programs.sqlite").exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text("islands:\n  cuont: 3\n")
    out = _evolve(files, tmp_path / "y", "--config", str(bad))
    assert out.returncode == 2 and "islands.cuont" in out.stderr
    assert not (tmp_path / "y").exists()
