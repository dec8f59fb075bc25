"""Hand-made SVG charts and the escaping every page uses.

Each chart function returns a `<figure>` string: an inline `<svg>` (fixed viewBox, scales with
the page) and an HTML legend. Text goes through `esc`; a value that is not a finite number is
never drawn (no NaN reaches an attribute), and a chart with nothing to draw says so in words.

    line_chart    series of (x, y) points: lines, steps, dashed reference lines, a scatter
                  underlay drawn as one path; linear or log2 x
    whisker_chart horizontal: one row per category, a marker per series with its interval
    bar_chart     horizontal bars with counts
"""

from __future__ import annotations

import html
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evokernel.report.outcomes import finite, number

# Tableau 10: distinct on screen and in print; islands and systems cycle through it.
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def esc(value: object) -> str:
    """Text or attribute value, escaped for HTML and SVG (quotes included)."""
    return html.escape(str(value), quote=True)


def script_json(data: object) -> str:
    """JSON for a `<script type="application/json">` block: no `<`, `>` or `&` survives, so
    candidate text cannot close the script element or open a comment."""
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(raw, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def clean(value: Any) -> Any:
    """`value` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def fmt(value: object, digits: int = 4) -> str:
    """A number for people: 4 significant digits, thousands separated; '—' when missing."""
    if not finite(value):
        return "—" if value is None else esc(value)
    v = float(value)  # type: ignore[arg-type]
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step - 1e-9) * step
    ticks = []
    t = start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


@dataclass
class Series:
    name: str
    points: Sequence[tuple[float, float | None]]  # points that are not finite are skipped
    color: str
    dashed: bool = False
    step: bool = False  # horizontal then vertical (a best-so-far curve)
    markers: bool = True


@dataclass
class Mark:
    """A reference line across the plot: at x (`axis` "x") or at y."""

    value: float
    label: str
    axis: str = "y"
    color: str = "#555"


@dataclass
class Frame:
    """Maps data to pixels inside a width x height chart with room for axes."""

    x0: float
    x1: float
    y0: float
    y1: float
    width: int = 640
    height: int = 300
    log_x: bool = False
    left: int = 64
    right: int = 16
    top: int = 14
    bottom: int = 44

    def _xv(self, x: float) -> float:
        return math.log2(x) if self.log_x else x

    def px(self, x: float) -> float:
        a, b = self._xv(self.x0), self._xv(self.x1)
        span = (b - a) or 1.0
        return self.left + (self._xv(x) - a) / span * (self.width - self.left - self.right)

    def py(self, y: float) -> float:
        span = (self.y1 - self.y0) or 1.0
        return self.top + (self.y1 - y) / span * (self.height - self.top - self.bottom)


def _n(v: float) -> str:
    return f"{v:.1f}"


def _legend(items: Sequence[tuple[str, str, bool]]) -> str:
    parts = []
    for name, col, dashed in items:
        style = "dashed" if dashed else "solid"
        parts.append(
            f'<span class="key"><i style="border-top:3px {style} {esc(col)}"></i>{esc(name)}</span>'
        )
    return f"<figcaption>{''.join(parts)}</figcaption>" if parts else ""


def _empty(title: str, message: str) -> str:
    return (
        f'<figure class="chart empty"><div class="chart-title">{esc(title)}</div>'
        f'<p class="none">{esc(message)}</p></figure>'
    )


def _axes(f: Frame, x_label: str, y_label: str, x_ticks: list[float], y_ticks: list[float]) -> str:
    out = [
        f'<rect class="plot" x="{f.left}" y="{f.top}" width="{f.width - f.left - f.right}" '
        f'height="{f.height - f.top - f.bottom}"/>'
    ]
    for t in y_ticks:
        y = f.py(t)
        out.append(
            f'<line class="grid" x1="{f.left}" x2="{f.width - f.right}" y1="{_n(y)}" y2="{_n(y)}"/>'
            f'<text class="tick" x="{f.left - 6}" y="{_n(y + 4)}" text-anchor="end">{fmt(t)}</text>'
        )
    for t in x_ticks:
        x = f.px(t)
        out.append(
            f'<line class="grid" y1="{f.top}" y2="{f.height - f.bottom}" x1="{_n(x)}" '
            f'x2="{_n(x)}"/>'
            f'<text class="tick" x="{_n(x)}" y="{f.height - f.bottom + 16}" '
            f'text-anchor="middle">{fmt(t)}</text>'
        )
    mid_x = (f.left + f.width - f.right) / 2
    mid_y = (f.top + f.height - f.bottom) / 2
    out.append(
        f'<text class="label" x="{_n(mid_x)}" y="{f.height - 6}" text-anchor="middle">'
        f"{esc(x_label)}</text>"
        f'<text class="label" transform="translate(14 {_n(mid_y)}) rotate(-90)" '
        f'text-anchor="middle">{esc(y_label)}</text>'
    )
    return "".join(out)


def _log2_ticks(lo: float, hi: float) -> list[float]:
    ticks = [2.0**k for k in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)]
    ticks = [t for t in ticks if lo <= t <= hi]
    while len(ticks) > 9:
        ticks = ticks[::2]
    return ticks


def _usable(points: Sequence[tuple[float, float | None]], log_x: bool) -> list[tuple[float, float]]:
    out = []
    for x, y in points:
        fx, fy = number(x), number(y)
        if fx is not None and fy is not None and (fx > 0 or not log_x):
            out.append((fx, fy))
    return out


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    marks: Sequence[Mark] = (),
    scatter: Sequence[tuple[float, float | None]] = (),
    scatter_label: str = "",
    y_from_zero: bool = False,
    empty: str = "nothing to plot",
    width: int = 640,
    height: int = 300,
) -> str:
    drawn = [(s, _usable(s.points, log_x)) for s in series]
    dots = _usable(scatter, log_x)
    pts = [p for _, points in drawn for p in points] + dots
    if not pts:
        return _empty(title, empty)
    xs = [p[0] for p in pts] + [m.value for m in marks if m.axis == "x" and finite(m.value)]
    ys = [p[1] for p in pts] + [m.value for m in marks if m.axis == "y" and finite(m.value)]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if y_from_zero:
        y0 = min(0.0, y0)
    pad = (y1 - y0) * 0.06 or abs(y1) * 0.1 or 1.0
    y0, y1 = (y0 if y_from_zero and y0 == 0 else y0 - pad), y1 + pad
    if x1 == x0:
        x0, x1 = (x0 / 2, x0 * 2) if log_x else (x0 - 1, x1 + 1)
    f = Frame(x0, x1, y0, y1, width, height, log_x)
    x_ticks = _log2_ticks(x0, x1) if log_x else nice_ticks(x0, x1)
    y_ticks = [t for t in nice_ticks(y0, y1) if y0 <= t <= y1]
    x_ticks = [t for t in x_ticks if x0 <= t <= x1]
    body = [_axes(f, x_label, y_label, x_ticks, y_ticks)]
    if dots:
        d = "".join(f"M{_n(f.px(x))} {_n(f.py(y))}h0" for x, y in dots)
        body.append(f'<path class="dots" d="{d}"><title>{esc(scatter_label)}</title></path>')
    for m in marks:
        if not finite(m.value):
            continue
        if m.axis == "x":
            x = f.px(m.value)
            body.append(
                f'<line class="mark" stroke="{esc(m.color)}" x1="{_n(x)}" x2="{_n(x)}" '
                f'y1="{f.top}" y2="{f.height - f.bottom}"/>'
                f'<text class="mark-label" x="{_n(x + 3)}" y="{f.top + 10}">{esc(m.label)}</text>'
            )
        else:
            y = f.py(m.value)
            body.append(
                f'<line class="mark" stroke="{esc(m.color)}" x1="{f.left}" x2="{f.width - f.right}"'
                f' y1="{_n(y)}" y2="{_n(y)}"/><text class="mark-label" x="{f.width - f.right - 4}"'
                f' y="{_n(y - 4)}" text-anchor="end">{esc(m.label)}</text>'
            )
    for s, points in drawn:
        if not points:
            continue
        p = sorted(points)
        d = f"M{_n(f.px(p[0][0]))} {_n(f.py(p[0][1]))}"
        for (_, ya), (xb, yb) in itertools.pairwise(p):
            if s.step:
                d += f"H{_n(f.px(xb))}V{_n(f.py(yb))}" if yb != ya else f"H{_n(f.px(xb))}"
            else:
                d += f"L{_n(f.px(xb))} {_n(f.py(yb))}"
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        body.append(
            f'<path class="series" stroke="{esc(s.color)}"{dash} d="{d}"><title>{esc(s.name)}'
            "</title></path>"
        )
        if s.markers and len(p) <= 400:
            d = "".join(f"M{_n(f.px(x))} {_n(f.py(y))}h0" for x, y in p)
            body.append(f'<path class="markers" stroke="{esc(s.color)}" d="{d}"/>')
    legend = [(s.name, s.color, s.dashed) for s, points in drawn if points]
    legend += [(m.label, m.color, True) for m in marks if m.label and finite(m.value)]
    return (
        f'<figure class="chart"><div class="chart-title">{esc(title)}</div>'
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{esc(title)}">'
        f"{''.join(body)}</svg>{_legend(legend)}</figure>"
    )


@dataclass
class Whisker:
    """One marker of a whisker row: a value and its interval (either may be missing)."""

    series: str
    value: float | None
    low: float | None = None
    high: float | None = None
    note: str = ""


@dataclass
class WhiskerRow:
    label: str
    items: list[Whisker] = field(default_factory=list)


def whisker_chart(
    rows: Sequence[WhiskerRow],
    colors: dict[str, str],
    *,
    title: str,
    x_label: str,
    reference: float | None = None,
    reference_label: str = "",
    empty: str = "nothing to plot",
    width: int = 640,
) -> str:
    values = [
        v
        for r in rows
        for w in r.items
        for v in (number(w.value), number(w.low), number(w.high))
        if v is not None
    ]
    if not values:
        return _empty(title, empty)
    if reference is not None:
        values.append(reference)
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or 0.1
    row_h = 16 * max(1, len(colors)) + 10
    height = 14 + 44 + row_h * len(rows)
    f = Frame(lo - pad, hi + pad, 0, 1, width, height, left=170)
    ticks = [t for t in nice_ticks(lo - pad, hi + pad) if lo - pad <= t <= hi + pad]
    body = [_axes(f, x_label, "", ticks, [])]
    if reference is not None:
        x = f.px(reference)
        body.append(
            f'<line class="mark" stroke="#555" x1="{_n(x)}" x2="{_n(x)}" y1="{f.top}" '
            f'y2="{height - f.bottom}"/><text class="mark-label" x="{_n(x + 3)}" '
            f'y="{f.top + 10}">{esc(reference_label)}</text>'
        )
    order = list(colors)
    for r_i, row in enumerate(rows):
        top = f.top + r_i * row_h
        body.append(
            f'<text class="tick" x="{f.left - 6}" y="{top + row_h / 2 + 4:.1f}" '
            f'text-anchor="end">{esc(row.label[:28])}<title>{esc(row.label)}</title></text>'
        )
        for w in row.items:
            y = top + 10 + order.index(w.series) * 16 if w.series in order else top + 10
            col = esc(colors.get(w.series, "#333"))
            tip = f"{row.label} — {w.series}: {fmt(w.value)}"
            value, low, high = number(w.value), number(w.low), number(w.high)
            if low is not None and high is not None:
                tip += f" [{fmt(low)}, {fmt(high)}]"
                body.append(
                    f'<line class="whisker" stroke="{col}" x1="{_n(f.px(low))}" '
                    f'x2="{_n(f.px(high))}" y1="{y:.1f}" y2="{y:.1f}"/>'
                )
            if w.note:
                tip += f" ({w.note})"
            if value is not None:
                body.append(
                    f'<circle class="point" fill="{col}" cx="{_n(f.px(value))}" '
                    f'cy="{y:.1f}" r="4"><title>{esc(tip)}</title></circle>'
                )
            else:
                body.append(
                    f'<text class="tick" x="{f.left + 4}" y="{y + 4:.1f}">{esc(w.series)}: '
                    f"{esc(w.note or 'no figure')}</text>"
                )
    legend = [(name, col, False) for name, col in colors.items()]
    return (
        f'<figure class="chart"><div class="chart-title">{esc(title)}</div>'
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{esc(title)}">'
        f"{''.join(body)}</svg>{_legend(legend)}</figure>"
    )


def bar_chart(
    bars: Sequence[tuple[str, float, str]],
    *,
    title: str,
    x_label: str,
    empty: str = "nothing to plot",
    width: int = 640,
    bar_color: str = "#e15759",
) -> str:
    """`bars`: (label, value, tooltip), drawn top to bottom."""
    bars = [(label, float(v), tip) for label, v, tip in bars if finite(v)]
    if not bars:
        return _empty(title, empty)
    height = 14 + 44 + 22 * len(bars)
    top = max(b[1] for b in bars) or 1.0
    f = Frame(0, top * 1.08, 0, 1, width, height, left=170)
    ticks = [t for t in nice_ticks(0, top * 1.08) if t <= top * 1.08]
    body = [_axes(f, x_label, "", ticks, [])]
    for i, (label, value, tip) in enumerate(bars):
        y = f.top + 4 + i * 22
        w = f.px(value) - f.left
        body.append(
            f'<text class="tick" x="{f.left - 6}" y="{y + 13}" text-anchor="end">'
            f"{esc(label[:28])}</text>"
            f'<rect class="bar" fill="{esc(bar_color)}" x="{f.left}" y="{y}" width="{_n(w)}" '
            f'height="16"><title>{esc(tip)}</title></rect>'
            f'<text class="tick" x="{_n(f.left + w + 4)}" y="{y + 13}">{fmt(value)}</text>'
        )
    return (
        f'<figure class="chart"><div class="chart-title">{esc(title)}</div>'
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{esc(title)}">'
        f"{''.join(body)}</svg></figure>"
    )
