"""`evokernel report BENCH-SERVE.json`: the page of a `bench serve` result.

Plots against the number of concurrent streams (log scale): aggregate tok/s with `generate`'s
batch-1 decode tok/s and the ideal linear scaling of the single-stream figure as dashed lines;
TTFT P50/P99; inter-token latency P50/P99. Then every figure in a table, `generate`'s batch-1
rows, the summary ratios and where the run happened. A CPU file says it makes no speed claim.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evokernel.bench.serve_accounts import FIELDS, LABELS, SHARES
from evokernel.bench.serve_bench import KIND, load
from evokernel.report.page import document, section, table, write_page
from evokernel.report.svg import Mark, Series, color, esc, fmt, line_chart

NAV = [
    ("throughput", "Throughput"),
    ("latency", "Latency"),
    ("figures", "Figures"),
    ("environment", "Environment"),
]


def is_serve_result(path: Path) -> bool:
    """Whether `path` is a bench serve result (so `report` draws this page)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("kind") == KIND


def write_serve_report(path: Path, out: Path | None = None) -> Path:
    doc = load(path)
    target = Path(out) if out is not None else Path(path).with_suffix(".html")
    return write_page(target, render_serve(doc))


def _share_or_fmt(key: str, value: float | None) -> str:
    if value is not None and key in SHARES:
        return f"{value:.0%}"
    return fmt(value)


def render_serve(doc: dict[str, Any]) -> str:
    rows = doc["results"]
    env, base = doc["env"], doc.get("baseline")
    where = env.get("gpu") or f"CPU ({env.get('cpu') or '?'})"
    title = f"Serving benchmark: {doc['model']['name']} on {where}"
    header = f"<h1>{esc(title)}</h1><div class='sub'>{esc(doc.get('server') or '')}</div>"
    if env.get("device") == "cpu":
        header += "<div class='banner'>CPU run: a correctness run, not a speed claim.</div>"
    n = [r["concurrency"] for r in rows]
    one = next((r for r in rows if r["concurrency"] == 1), None)
    marks = []
    if base:
        marks.append(Mark(base["decode_tok_s"], "generate, batch 1"))
    ideal = []
    if one and one["tok_s"]:
        ideal = [
            Series("linear from 1 stream", [(c, one["tok_s"] * c) for c in n], "#999", dashed=True)
        ]
    throughput = line_chart(
        [
            Series("aggregate tok/s", [(r["concurrency"], r["tok_s"]) for r in rows], color(0)),
            Series(
                "per-stream tok/s (P50)",
                [(r["concurrency"], r["stream_tok_s_p50"]) for r in rows],
                color(1),
            ),
            *ideal,
        ],
        title="Tokens per second",
        x_label="concurrent streams",
        y_label="tok/s",
        log_x=True,
        marks=marks,
        y_from_zero=True,
    )
    ttft = line_chart(
        [
            Series("TTFT P50", [(r["concurrency"], r["ttft_ms_p50"]) for r in rows], color(2)),
            Series(
                "TTFT P99",
                [(r["concurrency"], r["ttft_ms_p99"]) for r in rows],
                color(2),
                dashed=True,
            ),
        ],
        title="Time to first token",
        x_label="concurrent streams",
        y_label="ms",
        log_x=True,
        y_from_zero=True,
    )
    itl = line_chart(
        [
            Series("ITL P50", [(r["concurrency"], r["itl_ms_p50"]) for r in rows], color(3)),
            Series(
                "ITL P99",
                [(r["concurrency"], r["itl_ms_p99"]) for r in rows],
                color(3),
                dashed=True,
            ),
        ],
        title="Inter-token latency",
        x_label="concurrent streams",
        y_label="ms",
        log_x=True,
        y_from_zero=True,
    )
    ratios = doc["summary"].get("aggregate_vs_single", {})
    bounds = doc["summary"].get("decode_bound_vs_single", {})
    head = [
        "streams",
        "requests",
        "errors",
        "tokens",
        "wall s",
        "tok/s",
        "x 1 stream",
        "decode steps alone: x 1 stream",
        "stream tok/s",
        "TTFT P50",
        "TTFT P99",
        "ITL P50",
        "ITL P99",
    ]
    body = [
        [
            fmt(r["concurrency"]),
            fmt(r["requests"]),
            fmt(r["errors"]),
            fmt(r["tokens"]),
            fmt(r["wall_s"]),
            fmt(r["tok_s"]),
            fmt(ratios.get(str(r["concurrency"]))),
            fmt(bounds.get(str(r["concurrency"]))),
            fmt(r["stream_tok_s_p50"]),
            fmt(r["ttft_ms_p50"]),
            fmt(r["ttft_ms_p99"]),
            fmt(r["itl_ms_p50"]),
            fmt(r["itl_ms_p99"]),
        ]
        for r in rows
    ]
    figures = table(head, body, set(range(len(head))))
    engine_rows = [(r["concurrency"], r.get("engine") or {}) for r in rows]
    if any(e.get("step_ms") is not None for _, e in engine_rows):
        spent = ["streams", *LABELS.values()]
        spent_body = [
            [fmt(c), *(_share_or_fmt(k, e.get(k)) for k in FIELDS)] for c, e in engine_rows
        ]
        figures += (
            "<h3>Where the time went (device time over the load's wall time; "
            "CPU seconds per second)</h3>" + table(spent, spent_body, set(range(len(spent))))
        )
    if base:
        gen = [
            [fmt(r["prompt_len"]), fmt(r["prefill_ms"]), fmt(r["decode_tok_s"])]
            for r in base["rows"]
        ]
        figures += "<h3>generate, batch 1 (same run)</h3>" + table(
            ["prompt tokens", "prefill ms", "decode tok/s"], gen, {0, 1, 2}
        )
    summary = doc["summary"]
    if "single_stream_vs_generate" in summary:
        ttft = ", ".join(f"prompt {k}: {fmt(v)}" for k, v in summary["ttft_p50_vs_prefill"].items())
        figures += (
            f"<p>Single stream through the server / generate: "
            f"<b>{fmt(summary['single_stream_vs_generate'])}</b>. TTFT P50 at one stream / "
            f"generate's prefill: {esc(ttft)}.</p>"
        )
    envs = [[esc(k), esc(v)] for k, v in env.items() if not isinstance(v, (dict, list))]
    envs += [
        ["command", esc(doc.get("command") or "")],
        ["server", esc(doc.get("server_command") or "")],
    ]
    body_html = (
        section("throughput", "Throughput", throughput)
        + section("latency", "Latency", ttft + itl)
        + section("figures", "Figures", figures)
        + section("environment", "Environment", table(["key", "value"], envs))
    )
    return document(title, header, NAV, body_html)
