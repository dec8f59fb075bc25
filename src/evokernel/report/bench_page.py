"""`evokernel report BENCH.json [...]`: the decode benchmark page.

Three plots against context position (log scale): tokens per second of every system with the
bandwidth floor as a dashed line, the percentage of the floor each system reaches (the floor is
the 100% line), and P50 (solid) and P99 (dashed) step latency; then every figure in a table,
and the rows that failed with their reasons. CPU files say on the page that they make no speed
claim.
"""

from __future__ import annotations

from pathlib import Path

from evokernel.report.bench_data import BenchData, floor_tok_s, load_bench
from evokernel.report.page import document, section, table, write_page
from evokernel.report.svg import Mark, Series, color, esc, fmt, line_chart

NAV = [
    ("throughput", "Throughput"),
    ("latency", "Latency"),
    ("figures", "Figures"),
    ("environment", "Environment"),
]


def default_out(first: Path) -> Path:
    return first.with_suffix(".html")


def write_bench_report(paths: list[Path], out: Path | None = None) -> Path:
    data = load_bench(list(paths))
    target = Path(out) if out is not None else default_out(Path(paths[0]))
    return write_page(target, render_bench(data))


def throughput_series(data: BenchData) -> list[Series]:
    return [
        Series(name, [(r.position, r.get("tok_s")) for r in data.of(name)], color(k))  # type: ignore[misc]
        for k, name in enumerate(data.series)
    ]


def floor_series(data: BenchData) -> list[Series]:
    return [
        Series(name, [(r.position, r.get("pct_floor")) for r in data.of(name)], color(k))  # type: ignore[misc]
        for k, name in enumerate(data.series)
    ]


def latency_series(data: BenchData) -> list[Series]:
    out = []
    for k, name in enumerate(data.series):
        rows = data.of(name)
        out.append(Series(f"{name} P50", [(r.position, r.get("ms_p50")) for r in rows], color(k)))  # type: ignore[misc]
        out.append(
            Series(
                f"{name} P99",
                [(r.position, r.get("ms_p99")) for r in rows],
                color(k),  # type: ignore[misc]
                dashed=True,
            )
        )
    return out


def _header(data: BenchData) -> str:
    first = data.files[0]
    doc, env, model = first.doc, first.env, first.model
    title = f"Decode benchmark: {model.get('name') or '?'} on {data.gpu}"
    sub = (
        f"{esc(model.get('dtype') or '')} · suite {esc(doc.get('suite') or '?')} · "
        f"{len(data.files)} file(s) · {esc(', '.join(data.series))}"
    )
    parts = [f"<h1>{esc(title)}</h1>", f'<div class="sub">{sub}</div>']
    if data.cpu or doc.get("label"):
        label = doc.get("label") or "CPU run"
        parts.append(
            f'<div class="banner">{esc(label)}: figures measured on '
            f"{esc(env.get('device') or '?')}"
            + (", not a speed claim" if data.cpu else "")
            + ".</div>"
        )
    models = {str(f.model.get("name")) for f in data.files}
    if len(models) > 1:
        parts.append(
            f'<div class="banner">The files hold different models: {esc(", ".join(sorted(models)))}'
            ".</div>"
        )
    return "".join(parts)


COLUMNS = {  # figure -> table heading, in table order
    "tok_s": "tok/s",
    "ms_p50": "P50 ms",
    "ms_p95": "P95 ms",
    "ms_p99": "P99 ms",
    "ms_mean": "mean ms",
    "floor_ms": "floor ms",
    "pct_floor": "% floor",
    "ttft_ms": "TTFT ms",
    "power_w": "power W",
    "tok_per_j": "tok/J",
    "ms_host_mean": "host ms",
    "wall_s": "row s",
}


def _figures(data: BenchData) -> str:
    head = ["system", "position", "steps", *COLUMNS.values(), "error"]
    rows = [
        [esc(name), fmt(r.position), fmt(r.steps)]
        + [fmt(r.get(k)) for k in COLUMNS]
        + [esc(r.error or "")]
        for name in data.series
        for r in data.of(name)
    ]
    failed = [r for r in data.rows if r.error]
    note = ""
    if failed:
        items = "".join(
            f"<li><b>{esc(r.series)}</b> at position {r.position}: <code>{esc(r.error)}</code></li>"
            for r in failed
        )
        note = f"<h3>Failed measurements</h3><ul>{items}</ul>"
    return section("figures", "Figures", table(head, rows, set(range(1, len(COLUMNS) + 3))) + note)


def _value(v: object) -> str:
    """A setting for people: dicts as "key value, ...", lists comma-separated, escaped."""
    if v is None:
        return "—"
    if isinstance(v, dict):
        return ", ".join(f"{esc(k)} {_value(x)}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(_value(x) for x in v)
    return esc(v)


def _environment(data: BenchData) -> str:
    keys = [
        "device",
        "gpu",
        "driver",
        "cuda",
        "torch",
        "triton",
        "transformers",
        "python",
        "sm_count",
        "copy_gbps",
        "clocks_mhz",
    ]
    head = ["file", "created", "model", "command", *keys]
    rows = []
    for f in data.files:
        env = f.env
        rows.append(
            [
                esc(f.path.name),
                esc(f.doc.get("created") or ""),
                esc(f.model.get("name") or ""),
                f"<code>{esc(f.doc.get('command') or '')}</code>",
            ]
            + [_value(env.get(k)) for k in keys]
        )
    model = data.files[0].model
    facts = [
        ("weights read per step", f"{fmt(model.get('weight_bytes'))} bytes"),
        ("KV cache per token of context", f"{fmt(model.get('kv_bytes_per_token'))} bytes"),
        ("options", _value(data.files[0].doc.get("options"))),
    ]
    inner = table(head, rows) + table(["", ""], [[esc(k), v] for k, v in facts])
    inner += (
        '<p class="note">The floor: every weight read once per token plus the KV cache up to the '
        "position, divided by the copy bandwidth measured in the same run.</p>"
    )
    return section("environment", "Hardware and software", inner)


def _by_position(series: list[Series], title: str, y_label: str, marks: list[Mark]) -> str:
    return line_chart(
        series,
        title=title,
        x_label="context position (tokens)",
        y_label=y_label,
        log_x=True,
        y_from_zero=True,
        marks=marks,
        empty="no system was measured",
    )


def render_bench(data: BenchData) -> str:
    floor = Series("bandwidth floor", floor_tok_s(data), "#1d2329", dashed=True, markers=False)
    tok = _by_position(
        [*throughput_series(data), floor], "Decode throughput by context position", "tokens / s", []
    )
    pct = _by_position(
        floor_series(data),
        "Share of the bandwidth floor",
        "% of the floor",
        [Mark(100.0, "floor (100%)", "y", "#1d2329")],
    )
    lat = _by_position(
        latency_series(data), "Decode step latency: P50 (solid), P99 (dashed)", "ms per step", []
    )
    body = "".join(
        [
            section("throughput", "Throughput", f'<div class="charts">{tok}{pct}</div>'),
            section("latency", "Latency", f'<div class="charts">{lat}</div>'),
            _figures(data),
            _environment(data),
        ]
    )
    first = data.files[0]
    return document(
        f"evokernel decode benchmark: {first.model.get('name') or first.path.stem}",
        _header(data),
        NAV,
        body,
    )
