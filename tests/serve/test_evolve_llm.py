"""The search's LLM client against a real server: a short `evolve` whose LLM diff mutator asks
`evokernel serve` (the tiny random checkpoint) for edits. Its answers are random bytes, not
code: every proposal must be rejected with a reason, its tokens counted, and the run finish."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import yaml
from server_proc import ServerProcess

PROGRAM = '''"""Toy program."""

# EVOLVE-BLOCK-START
A = 1  # tune: 1, 2, 3
# EVOLVE-BLOCK-END


def value():
    return A
'''

EVALUATOR = """import importlib.util


def evaluate(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"combined_score": float(module.value())}
"""

CONFIG = Path(__file__).parent / "data" / "evolve_llm.yaml"


def test_evolve_with_the_llm_mutator_against_our_server(tiny_chat, tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "ev.py").write_text(EVALUATOR)
    with ServerProcess(
        ["--model", str(tiny_chat), "--max-len", "4096", "--max-batch", "2"]
    ) as server:
        name = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
        cfg = yaml.safe_load(CONFIG.read_text())
        cfg["llm"]["api_base"] = server.url + "/v1"
        cfg["llm"]["models"][0]["name"] = name
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
        cmd = [
            sys.executable,
            "-m",
            "evokernel",
            "evolve",
            "--program",
            str(tmp_path / "prog.py"),
            "--evaluator",
            str(tmp_path / "ev.py"),
            "--config",
            str(tmp_path / "c.yaml"),
            "--out",
            str(tmp_path / "run"),
            "--device",
            "cpu",
            "--json",
        ]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        # A random model's replies are never edits: no child could be proposed, and the run
        # says so (exit 1) with the cause, rather than ending "finished".
        assert run.returncode == 1, run.stderr[-3000:]
        assert "no child program could be proposed" in run.stderr
        assert "no SEARCH/REPLACE edit in the answer" in run.stderr
        summary = json.loads(run.stdout.strip().splitlines()[-1])
        metrics = httpx.get(server.url + "/metrics").text
    assert summary["iterations_done"] == 3
    assert summary["tokens"] > 0  # the server's usage, counted by the search
    assert 'evokernel_requests_total{endpoint="chat",status="200"}' in metrics

    from evokernel.evolve.database import Database

    db = Database(tmp_path / "run" / "programs.sqlite", readonly=True)
    try:
        proposals = [p for p in db.programs if p.iteration >= 0]
    finally:
        db.close()
    assert len(proposals) == 3
    for p in proposals:
        assert p.status != "ok" and p.reasons, (p.status, p.reasons)
