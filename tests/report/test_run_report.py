"""`evokernel report RUN_DIR` without a browser: the command line, the figures the page is
built from (sessions and active time, failures, scenarios, LLM usage, phases), and the page's
promises: nothing external, everything from the run escaped."""

from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter

import pytest
from runs import db_ids

from evokernel.cli import main
from evokernel.report import run_stats as st
from evokernel.report.run_data import load_run
from evokernel.report.run_page import render_run, write_run_report

RUN_KINDS = ["generic", "failed", "empty", "resumed", "timed", "broken"]


def _cli(*args):
    cmd = [sys.executable, "-m", "evokernel", "report", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_cli_writes_the_report_into_the_run_directory(runs):
    done = _cli(runs.generic)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {runs.generic / 'report.html'}"
    html = (runs.generic / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "generic:prog" in html


def test_cli_refuses_bad_input_in_one_line(runs, tmp_path, capsys):
    (tmp_path / "nodb").mkdir()
    (tmp_path / "x.json").write_text("{}")
    cases = [
        ([tmp_path / "missing"], "no such run directory or file"),
        ([tmp_path / "nodb"], "holds no run"),
        ([runs.empty, tmp_path / "x.json"], "not both"),
        ([runs.empty, "--png", tmp_path / "png"], "--png is for bench decode files"),
        ([tmp_path / "x.json"], "not a bench decode result"),
    ]
    for args, message in cases:
        assert main(["report", *map(str, args)]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err
        assert message in err


def test_every_row_is_a_node_in_commit_order(runs):
    for kind in ("generic", "timed"):
        data = load_run(getattr(runs, kind))
        assert [n.id for n in data.nodes] == db_ids(getattr(runs, kind))
        for n in data.nodes:
            assert all(p < n.index for p in n.parents)


def test_resumed_run_time_leaves_out_the_pause(runs, tmp_path):
    data = load_run(runs.resumed)
    spans = st.sessions(data)
    assert len(spans) == 2 and all(s.recorded for s in spans)
    prog = st.progress(data)
    wall = max(n.committed_at for n in data.nodes) - min(n.committed_at for n in data.nodes)
    assert prog.active[-1][0] < wall - 2.0  # the 2.5 s pause is not counted
    assert len(prog.resumes_at_time) == 1 and len(prog.resumes_at_eval) == 1
    assert "resumed 1 time(s)" in render_run(data)
    # A session killed before it could record itself is inferred from its commits.
    copy = tmp_path / "killed"
    shutil.copytree(runs.resumed, copy)
    conn = sqlite3.connect(copy / "programs.sqlite")
    sessions = json.loads(conn.execute("SELECT value FROM meta WHERE key='sessions'").fetchone()[0])
    conn.execute("UPDATE meta SET value = ? WHERE key = 'sessions'", (json.dumps(sessions[1:]),))
    conn.commit()
    conn.close()
    killed = load_run(copy)
    spans = st.sessions(killed)
    assert [s.recorded for s in spans] == [False, True]
    assert st.progress(killed).active[-1][0] < wall - 2.0
    assert "1 of them ended without a record" in render_run(killed)


def test_failure_histogram_counts_the_reason_codes_of_the_database(runs):
    conn = sqlite3.connect(runs.generic / "programs.sqlite")
    expected: Counter[str] = Counter()
    query = "SELECT status, reasons, reused_from FROM programs"
    for status, reasons, reused in conn.execute(query):
        if status == "failed" and not reused:
            expected.update({r.split(":")[0] for r in json.loads(reasons)})
        elif status == "rejected":
            expected["rejected"] += 1
    conn.close()
    got = {f.code: f.count for f in st.failures(load_run(runs.generic))}
    assert got == dict(expected) and got


def test_timed_run_scenarios_usage_and_phases(runs):
    data = load_run(runs.timed)
    summary = json.loads((runs.timed / "summary.json").read_text())
    rows = st.scenario_rows(data)
    assert [r.name for r in rows] == [s["scenario"] for s in summary["dispatch"]]
    for r, d in zip(rows, summary["dispatch"]):
        assert r.dispatch["program"] == d["program"]
        assert r.best is not None and r.best["lo"] <= r.best["speedup"] <= r.best["hi"]
    usage = st.llm_usage(data)
    assert [u["model"] for u in usage] == ["stub-coder"]
    assert usage[0]["requests"] >= 1
    tokens = sum(n.tokens for n in data.nodes)
    assert usage[0]["prompt_tokens"] + usage[0]["completion_tokens"] == tokens
    phases = {p.phase: p for p in st.phase_rows(data)}
    evaluated = [n for n in data.nodes if n.evaluated_here]
    assert phases["startup"].count == len(evaluated)
    assert phases["timing"].count == sum(1 for n in evaluated if n.status == "ok")
    outcomes = {n.outcome for n in data.nodes}
    assert {
        "improved",
        "incorrect",
        "crashed",
        "timeout",
        "static",
        "not-run",
        "rejected",
        "migrant",
        "seed",
    } <= outcomes


def test_failed_and_empty_runs(runs):
    failed = load_run(runs.failed)
    assert failed.seed_failed and failed.best is None
    html = render_run(failed)
    assert "The seed program failed, so nothing was evolved" in html
    assert "No correct program." in html
    empty = load_run(runs.empty)
    assert {n.kind for n in empty.nodes} == {"seed"} and len(empty.nodes) == 2
    assert "is the seed itself" in render_run(empty)


LOADS = re.compile(
    r"""\b(?:src|href|action|formaction|poster|data|srcset|xlink:href)\s*=\s*["']?\s*"""
    r"""(?:[a-z][a-z0-9+.-]*:)?//|url\(\s*["']?\s*(?:[a-z]+:)?//|@import|\bfetch\s*\(|"""
    r"""XMLHttpRequest|WebSocket|EventSource|sendBeacon|\bimport\s*\(""",
    re.IGNORECASE,
)


@pytest.mark.parametrize("kind", RUN_KINDS)
def test_page_loads_nothing_and_escapes_the_run(kind, runs, tmp_path):
    html = write_run_report(getattr(runs, kind), tmp_path / "r.html").read_text()
    assert LOADS.search(html) is None, LOADS.search(html)
    assert "content=\"default-src 'none';" in html_lib.unescape(html)
    assert html.count("<script") == 2 and html.count("</script>") == 2
    # Candidate text (the LLM's answers, the evaluator's exception) never becomes markup.
    assert "<b>not bold</b>" not in html and "<img" not in html
    assert "alert(1)</script>" not in html


def test_a_generic_run_shows_artifacts_and_what_each_mutator_did(tmp_path):
    program = "X = 1.0\n\n\ndef value():\n    return -((X - 3.0) ** 2)\n"
    evaluator = (
        "import importlib.util\nfrom openevolve.evaluation_result import EvaluationResult\n\n\n"
        "def evaluate(path):\n"
        "    spec = importlib.util.spec_from_file_location('c', path)\n"
        "    m = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(m)\n"
        "    return EvaluationResult({'combined_score': m.value()}, {'hint': f'X={m.X}'})\n"
    )
    (tmp_path / "p.py").write_text(program)
    (tmp_path / "e.py").write_text(evaluator)
    run = tmp_path / "run"
    assert main([
        "evolve", "--program", str(tmp_path / "p.py"), "--evaluator", str(tmp_path / "e.py"),
        "--out", str(run), "--iterations", "6", "--device", "cpu",
    ]) == 0  # fmt: skip
    data = load_run(run)
    seed = next(n for n in data.nodes if n.id == "seed")
    assert seed.to_json()["artifacts"] == {"hint": "X=1.0"}
    rows = st.mutators(data)
    assert rows and all(r.kind.startswith("offline:") for r in rows)
    assert sum(r.proposals for r in rows) == 6
    html = render_run(data)
    assert "no child" in html and "invalid" in html and "Fitness: combined_score" in html
