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
        "--min-requests",
        "4",  # the single stream sends 4 requests, each of the 3 streams 2
        "--serve-args",
        "--prefill-budget 16",
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
    for row, n, requests in zip(doc["results"], (1, 3), (4, 6)):
        assert row["concurrency"] == n and row["errors"] == 0
        assert row["requests"] == requests
        assert row["tokens"] == row["usage_tokens"] == requests * 8
        assert row["ttft_ms_p50"] > 0 and row["itl_ms_p50"] >= 0
        e = row["engine"]  # where the time went, from /metrics around the load
        assert e["step_ms"] > 0 and 1 <= e["rows_per_step"] <= e["bucket_rows_per_step"] <= 3
        assert e["prefill_ms"] > 0 and e["prefill_padding"] == 1.0  # CPU: prompts unpadded
        assert 0 < e["decode_share"] + e["prefill_share"] <= 1.05
        assert e["engine_cpu"] > 0 and e["http_cpu"] >= 0  # /proc ticks: 10 ms
        assert e["host_ms_per_turn"] > 0 and set(e["host_us_per_turn"]) >= {"admit", "wait"}
    assert "--prefill-budget 16" in doc["server_command"]
    assert "(shares: of the wall time)" in run.stdout
    assert [r["prompt_len"] for r in doc["baseline"]["rows"]] == [5, 30]
    assert "single_stream_vs_generate" in doc["summary"]
    bound = doc["summary"]["decode_bound_vs_single"]
    assert set(bound) == {"1", "3"} and all(v > 0 for v in bound.values())
    rows = list(csv.DictReader(out.with_suffix(".csv").open()))
    assert [r["concurrency"] for r in rows] == ["1", "3"]
    assert float(rows[0]["engine_step_ms"]) > 0
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
    assert "not a speed claim" in html and "Where the time went" in html


def test_bench_serve_refuses_serve_args_it_sets_itself(tiny_chat, tmp_path):
    cmd = [sys.executable, "-m", "evokernel", "bench", "serve", "--model", str(tiny_chat)]
    run = subprocess.run(
        [*cmd, "--device", "cpu", "--serve-args", "--max-batch=4 --port 9"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0
    assert "--serve-args may not set --max-batch, --port" in run.stderr
    assert "Traceback" not in run.stderr
