"""`evokernel report RUN_DIR`: the run report, RUN_DIR/report.html.

Sections: the evolution tree (click a program for its figures and its diff against its
parent), best-so-far fitness against evaluations and against active time, per-scenario speedups
of the best program and of the dispatch table with their 95% intervals and the roofline
fraction, the winner's diff against the seed, failure reasons, mutators and LLM usage,
evaluator phase times, and the hardware and software the run saw.
"""

from __future__ import annotations

import datetime
import time
from collections import Counter
from pathlib import Path
from typing import Any

from evokernel.report import run_stats as st
from evokernel.report.outcomes import OUTCOMES, finite, number
from evokernel.report.page import asset, cards, diff_block, document, section, table, write_page
from evokernel.report.run_data import RunData, load_run, unified_diff
from evokernel.report.svg import (
    Mark,
    Series,
    Whisker,
    WhiskerRow,
    bar_chart,
    color,
    esc,
    fmt,
    line_chart,
    whisker_chart,
)
from evokernel.report.tree_svg import island_css, legend, tree_svg

NAV = [
    ("tree", "Tree"),
    ("progress", "Progress"),
    ("scenarios", "Scenarios"),
    ("winner", "Winner"),
    ("failures", "Failures"),
    ("mutators", "Mutators"),
    ("evaluator", "Evaluator"),
    ("environment", "Environment"),
]


def write_run_report(run_dir: Path, out: Path | None = None) -> Path:
    data = load_run(Path(run_dir))
    target = Path(out) if out is not None else data.path / "report.html"
    return write_page(target, render_run(data))


def _when(t: object) -> str:
    if not finite(t):
        return "—"
    stamp = datetime.datetime.fromtimestamp(float(t), datetime.timezone.utc)  # type: ignore[arg-type]
    return stamp.strftime("%Y-%m-%d %H:%M:%S UTC")


def _header(data: RunData) -> str:
    s = data.status
    name = data.meta.get("name") or "run"
    best = s.get("best") or {}
    parts = [
        f"<h1>evokernel run report: {esc(name)}</h1>",
        f'<div class="sub">{esc(data.path)} · {esc(data.meta.get("device") or "?")} · '
        f"{esc(s.get('state', ''))} · written {esc(_when(time.time()))}</div>",
        cards(
            [
                (
                    f"{fmt(s.get('iterations_done'))}/{fmt(s.get('iterations_target'))}",
                    "iterations",
                ),
                (fmt(s.get("evaluated")), "evaluated"),
                (fmt(s.get("valid")), "correct"),
                (fmt(s.get("failed")), "failed"),
                (fmt(s.get("rejected")), "rejected"),
                (fmt(s.get("duplicates")), "duplicates"),
                (f"{fmt(best.get('fitness'))}", f"best fitness ({best.get('id', 'none')})"),
                (fmt(s.get("tokens")), "LLM tokens"),
                (f"${float(s.get('cost_usd') or 0):.4f}", "LLM cost"),
            ]
        ),
        f'<div class="note">fitness: {esc(data.meta.get("fitness_label") or "")}</div>',
    ]
    seed = data.seed
    if data.seed_failed and seed is not None:
        reasons = "; ".join(seed.reasons) or "no reason recorded"
        parts.append(
            '<div class="banner bad">The seed program failed, so nothing was evolved: '
            f"{esc(reasons)}</div>"
        )
    elif seed is None:
        parts.append('<div class="banner bad">The run holds no seed program.</div>')
    spans = st.sessions(data)
    if len(spans) > 1:
        killed = sum(1 for x in spans if not x.recorded) - (1 if data.running else 0)
        text = f"This run ran in {len(spans)} sessions (resumed {len(spans) - 1} time(s)"
        text += f", {killed} of them ended without a record: killed)" if killed > 0 else ")"
        parts.append(f'<div class="banner">{esc(text)}; time axes leave out the pauses.</div>')
    for w in data.warnings:
        parts.append(f'<div class="banner">{esc(w)}</div>')
    return "".join(parts)


def _tree(data: RunData) -> tuple[str, dict[str, Any]]:
    best = data.best
    markup = tree_svg(data.nodes, int(data.meta.get("islands") or 1), best.index if best else -1)
    counts = Counter(n.outcome for n in data.nodes)
    tools = (
        '<div class="tree-tools"><button type="button" id="zoom-out" title="zoom out">−</button>'
        '<button type="button" id="zoom-in" title="zoom in">+</button>'
        '<button type="button" id="zoom-fit">fit width</button>'
        '<button type="button" id="zoom-reset">1:1</button>'
        '<button type="button" id="goto-best">best program</button>'
        '<input type="text" id="find" placeholder="program id, Enter" aria-label="find program">'
        f'<span class="note">{_row_counts(data)} · left to right: commit order (iteration '
        "order, migrants at their boundary), islands are bands; ctrl+wheel zooms; dashed "
        "grey: migrant or copy, dashed: second parent</span></div>"
    )
    inner = (
        f"{tools}{legend(dict(counts))}"
        f'<div class="tree-wrap"><div id="tree-scroll">{markup.svg}</div>'
        '<aside id="details"><p class="none">Click a program.</p></aside></div>'
        '<div id="tooltip"></div>'
    )
    payload = {
        "nodes": [n.to_json() for n in data.nodes],
        "pos": markup.positions,
        "best": best.index if best else -1,
        "outcomes": OUTCOMES,
    }
    return section("tree", "Evolution tree", inner), payload


def _row_counts(data: RunData) -> str:
    """The tree's rows, said so that they add up to the header's counts."""
    evaluated = sum(1 for n in data.nodes if n.evaluated_here)
    copies = sum(1 for n in data.nodes if n.migrant or (n.iteration < 0 and n.reused_from))
    other = len(data.nodes) - evaluated - copies
    text = f"{len(data.nodes)} rows: {evaluated} evaluated, {copies} seed copies and migrants"
    return text + (f", {other} reused, duplicate or rejected" if other else "")


def axis_label(label: str, limit: int = 40) -> str:
    """A fitness label short enough for an axis, cut at a word (the full one is in a note)."""
    if len(label) <= limit:
        return label
    cut = label[:limit].rsplit(" ", 1)[0].rstrip(",;:(")
    return cut + " …"


def _progress(data: RunData) -> str:
    p = st.progress(data)
    full = data.meta.get("fitness_label") or "fitness"
    label = axis_label(full)
    resume_marks = [Mark(x, "resumed", "x", "#bf8700") for x in p.resumes_at_eval]
    a = line_chart(
        [Series("best so far", p.evals, color(0), step=True, markers=False)],
        title="Best fitness against evaluations",
        x_label="evaluations (commit order)",
        y_label=label,
        marks=resume_marks,
        scatter=p.scatter,
        scatter_label="each correct program's fitness",
        empty="no correct program: nothing to plot",
    )
    b = line_chart(
        [Series("best so far", p.active, color(1), step=True, markers=False)],
        title="Best fitness against active time",
        x_label="active seconds (pauses between sessions left out)",
        y_label=label,
        marks=[Mark(x, "resumed", "x", "#bf8700") for x in p.resumes_at_time],
        empty="no correct program: nothing to plot",
    )
    note = f'<p class="note">Fitness: {esc(full)}. Grey dots: every correct program\'s fitness.</p>'
    return section("progress", "Progress", f'<div class="charts">{a}{b}</div>{note}')


def _ci_text(lo: object, hi: object) -> str:
    return f"[{fmt(lo)}, {fmt(hi)}]" if finite(lo) or finite(hi) else "—"


def _scenarios(data: RunData) -> str:
    rows = st.scenario_rows(data)
    if not rows:
        return section(
            "scenarios",
            "Scenarios",
            '<p class="none">This task has no timed scenarios (a generic evaluator scores whole '
            "programs).</p>",
        )
    best = data.best
    best_name = f"best program ({best.id})" if best else "best program"
    colors = {best_name: color(0), "dispatch table": color(1)}
    chart_rows = []
    table_rows = []
    for r in rows:
        b = r.best or {}
        d = r.dispatch
        ci = d.get("speedup_ci") or (None, None)
        chosen = d.get("program") or "baseline"
        chart_rows.append(
            WhiskerRow(
                f"{r.name} ({r.regime})" if r.regime else r.name,
                [
                    Whisker(best_name, b.get("speedup"), b.get("lo"), b.get("hi")),
                    Whisker(
                        "dispatch table",
                        d.get("speedup") if chosen != "baseline" else 1.0,
                        ci[0],
                        ci[1],
                        "the baseline" if chosen == "baseline" else f"program {chosen}",
                    ),
                ],
            )
        )
        roof = number(b.get("roof"))
        bar = (
            f'<span class="roofbar" style="width:{max(0.0, min(100.0, roof)):.0f}px"></span>'
            if roof is not None
            else ""
        )
        table_rows.append(
            [
                esc(r.name),
                esc(r.regime),
                fmt(b.get("speedup")),
                _ci_text(b.get("lo"), b.get("hi")),
                f"{bar}{fmt(roof)}",
                esc(", ".join(b.get("flags") or [])),
                esc(chosen),
                fmt(d.get("speedup")),
                _ci_text(*ci),
            ]
        )
    timed = any(finite((r.best or {}).get("speedup")) for r in rows)
    empty = (
        "nothing was timed (CPU interpreter: correctness only; every scenario keeps the baseline)"
        if data.meta.get("device") == "cpu"
        else "no speedup was measured"
    )
    chart = whisker_chart(
        chart_rows,
        colors,
        title="Speedup over the baseline per scenario (95% interval)",
        x_label="speedup (baseline = 1)",
        reference=1.0 if timed else None,
        reference_label="baseline",
        empty=empty,
    )
    head = [
        "scenario",
        "regime",
        "best: speedup",
        "95% interval",
        "% of roofline",
        "flags",
        "dispatch: program",
        "speedup",
        "95% interval",
    ]
    inner = chart + table(head, table_rows, {2, 4, 7})
    return section("scenarios", "Scenarios", inner)


def _winner(data: RunData) -> str:
    best = data.best
    if best is None:
        return section("winner", "Winner", '<p class="none">No correct program.</p>')
    if best.kind == "seed" or best.code == data.seed_code:
        inner = f'<p class="note">The best program, {esc(best.id)}, is the seed itself.</p>'
        return section("winner", "Winner against the seed", inner)
    text = unified_diff(data.seed_code, best.code, "seed", best.id)
    inner = (
        f'<p class="note">{esc(best.id)} (island {best.island}, iteration {best.iteration}, '
        f"fitness {fmt(best.fitness)}): {esc(best.description)}</p>{diff_block(text)}"
    )
    return section("winner", "Winner against the seed", inner)


def _failures(data: RunData) -> str:
    rows = st.failures(data)
    if not rows:
        return section("failures", "Failures", '<p class="none">No program failed.</p>')
    chart = bar_chart(
        [(r.code, r.count, f"{r.code}: {r.meaning}") for r in rows],
        title="Failure reasons (programs per reason code)",
        x_label="programs",
    )
    tab = table(
        ["code", "programs", "meaning", "example"],
        [
            [esc(r.code), fmt(r.count), esc(r.meaning), f"<code>{esc(r.example)}</code>"]
            for r in rows
        ],
        {1},
    )
    return section("failures", "Failures", chart + tab)


def _mutators(data: RunData) -> str:
    rows = st.mutators(data)
    columns = ["proposals", "no_child", "invalid", "duplicates", "evaluated", "correct",
               "improved", "failed"]  # fmt: skip
    inner = (
        table(
            ["mutation", *(c.replace("_", " ") for c in columns)],
            [[esc(r.kind), *(fmt(getattr(r, c)) for c in columns)] for r in rows],
            set(range(1, len(columns) + 1)),
        )
        + '<p class="note">Per kind of proposal: iterations that drew it; no child (it could '
        "not make a program); invalid (children that did not parse or compile, or broke the "
        "EVOLVE-BLOCK rule: the offline mutator throws its own away before any evaluation); "
        "duplicates (children repeating a program already tried); evaluated; correct; "
        "improved (a fitness above the parent's); failed.</p>"
        if rows
        else '<p class="none">No iteration ran.</p>'
    )
    usage = st.llm_usage(data)
    if usage:
        keys = [k for k in st.TALLY_KEYS if any(u.get(k) is not None for u in usage)]
        inner += "<h3>LLM usage by model</h3>" + table(
            ["model", *keys],
            [[esc(u["model"]), *(fmt(u.get(k)) for k in keys)] for u in usage],
            set(range(1, len(keys) + 1)),
        )
    else:
        inner += '<p class="note">No LLM ran in this run.</p>'
    return section("mutators", "Mutators and LLM usage", inner)


def _evaluator(data: RunData) -> str:
    rows = st.phase_rows(data)
    if not rows:
        return section("evaluator", "Evaluator", '<p class="none">No evaluation times.</p>')
    chart = bar_chart(
        [(r.phase, r.median, f"{r.phase}: median {fmt(r.median)} s over {r.count}") for r in rows],
        title="Median seconds per evaluator phase",
        x_label="seconds",
        bar_color="#4e79a7",
    )
    tab = table(
        ["phase", "evaluations", "median s", "p90 s", "max s", "total s"],
        [
            [esc(r.phase), fmt(r.count), fmt(r.median), fmt(r.p90), fmt(r.max), fmt(r.total)]
            for r in rows
        ],
        {1, 2, 3, 4, 5},
    )
    note = (
        '<p class="note">Phases come from each evaluation\'s "phases" artifact (start-up, load, '
        'correctness, timing); "evaluation" is the whole wall time the search measured.</p>'
    )
    if not any(r.phase != "evaluation" for r in rows):
        note = '<p class="note">The evaluator recorded no phase times (only wall times).</p>'
    return section("evaluator", "Evaluator", chart + tab + note)


def _environment(data: RunData) -> str:
    m = data.meta
    cfg = m.get("config") or {}
    problem = m.get("problem") or {}
    rows = [
        ("task", m.get("name")),
        ("device", m.get("device")),
        (
            "problem",
            ", ".join(f"{k}={v}" for k, v in sorted(problem.items()) if k != "evaluator_sha256"),
        ),
        ("fitness", m.get("fitness_label")),
        ("seed", cfg.get("seed")),
        ("islands", m.get("islands")),
        ("iterations target", m.get("iterations_target")),
        ("evaluation workers / in flight", f"{m.get('workers')} / {m.get('lag')}"),
        (
            "mutators",
            ", ".join(
                f"{k} {v}" for k, v in ((cfg.get("mutators") or {}).get("weights") or {}).items()
            ),
        ),
        (
            "LLM models",
            ", ".join(
                str(x.get("name"))
                for x in (cfg.get("llm") or {}).get("models") or []
                if isinstance(x, dict)
            ),
        ),
        ("MAP-Elites features", ", ".join(m.get("features") or [])),
        ("created", _when(m.get("created"))),
    ]
    inner = table(["", ""], [[esc(k), esc(v if v not in (None, "") else "—")] for k, v in rows])
    devices = st.devices(data)
    if devices:
        keys = [
            "kind",
            "name",
            "driver",
            "torch",
            "triton",
            "sm_count",
            "l2_bytes",
            "copy_gbps",
            "clocks",
        ]
        inner += "<h3>Devices the evaluations reported</h3>" + table(
            [*keys, "evaluations"],
            [[_hardware_cell(d.get(k)) for k in keys] + [fmt(c)] for d, c in devices],
        )
    else:
        inner += '<p class="note">The evaluations reported no device (generic evaluator).</p>'
    labels = st.timing_labels(data)
    if labels:
        inner += "<h3>Timing</h3>" + table(
            ["timing label", "evaluations"], [[esc(t), fmt(c)] for t, c in labels], {1}
        )
    spans = st.sessions(data)
    if spans:
        inner += "<h3>Sessions</h3>" + table(
            ["started", "ended", "seconds", "stop reason"],
            [
                [
                    esc(_when(x.start)),
                    esc(_when(x.end) if x.recorded else "(no record)"),
                    fmt(round(x.end - x.start, 1)),
                    esc(x.stop_reason or ("—" if x.recorded else "killed or running")),
                ]
                for x in spans
            ],
            {2},
        )
    return section("environment", "Hardware and software", inner)


def render_run(data: RunData) -> str:
    tree, payload = _tree(data)
    body = "".join(
        [
            tree,
            _progress(data),
            _scenarios(data),
            _winner(data),
            _failures(data),
            _mutators(data),
            _evaluator(data),
            _environment(data),
        ]
    )
    title = f"evokernel report: {data.meta.get('name') or data.path.name}"
    return document(
        title,
        _header(data),
        NAV,
        body,
        script=asset("run.js"),
        data=payload,
        extra_css=island_css(max(1, int(data.meta.get("islands") or 1))),
    )


def _hardware_cell(value: object) -> str:
    """A hardware figure; 0 or nothing means unknown (a CPU run measures no bandwidth)."""
    if value in (None, "", 0, 0.0) or value == {}:
        return "—"
    return fmt(value) if isinstance(value, float) else esc(value)
