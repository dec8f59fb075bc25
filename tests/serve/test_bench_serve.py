"""`bench serve` on the CPU (a smoke run, no speed claim): the server starts, the clients
stream, the JSON and CSV hold a row per concurrency, and `report` draws the page."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys


def test_bench_serve_writes_results_and_report_draws_them(tiny_chat, tmp_path):
    out = tmp_path / "serve.json"
    cmd = [
        sys.executable,
        "-m",
        "evokernel",
        "bench",
        "serve",
        "--model",
        str(tiny_chat),
        "--device",
        "cpu",
        "--concurrency",
        "1,3",
        "--prompt-lens",
        "5,30",
        "--max-tokens",
        "8",
        "--rounds",
        "2",
        "--out",
        str(out),
    ]
    env = {"OMP_NUM_THREADS": "1"} | dict(os.environ)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["kind"] == "evokernel-bench-serve-summary" and set(summary["tok_s"]) == {
        "1",
        "3",
    }
    doc = json.loads(out.read_text())
    assert doc["kind"] == "evokernel-bench-serve" and doc["server_exit_code"] == 0
    for row, n in zip(doc["results"], (1, 3)):
        assert row["concurrency"] == n and row["errors"] == 0
        assert row["requests"] == 2 * n and row["tokens"] == row["usage_tokens"] == 2 * n * 8
        assert row["ttft_ms_p50"] > 0 and row["itl_ms_p50"] >= 0
    assert [r["prompt_len"] for r in doc["baseline"]["rows"]] == [5, 30]
    assert "single_stream_vs_generate" in doc["summary"]
    rows = list(csv.DictReader(out.with_suffix(".csv").open()))
    assert [r["concurrency"] for r in rows] == ["1", "3"]
    assert "CPU: a correctness run" in run.stdout

    page = subprocess.run(
        [sys.executable, "-m", "evokernel", "report", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert page.returncode == 0, page.stderr
    html = out.with_suffix(".html").read_text()
    assert "Serving benchmark" in html and "Inter-token latency" in html and "<svg" in html
    assert "not a speed claim" in html
