"""The evolution tree as SVG markup: one element per program, a few paths for all edges.

Every program is one `<path class="n o-OUTCOME ..." data-i="INDEX">` whose shape encodes the
outcome and whose colour encodes the island; the page script finds programs by `data-i` and
reads their figures from the page data. Edges are drawn as one path per island (parent ->
child on the same island), one for second parents (crossover), one for links across islands
(migrants, the seed's island copies) and one for stubs of evicted parents, so the DOM grows
by one element per program and no more.
"""

from __future__ import annotations

from dataclasses import dataclass

from evokernel.report.outcomes import OUTCOMES
from evokernel.report.run_data import Node
from evokernel.report.svg import PALETTE, esc
from evokernel.report.tree_layout import layout_tree

DX = 16  # pixels per program along time
DY = 16  # pixels per lane
LEFT = 70  # room for the island labels
TOP = 26  # room for the iteration ruler
BAND_GAP = 8

# outcome -> (shape, size, style); style: filled | hollow | line (see report.css)
MARKERS: dict[str, tuple[str, float, str]] = {
    "seed": ("circle", 7.0, "filled"),
    "improved": ("circle", 5.5, "filled"),
    "correct": ("circle", 4.0, "filled"),
    "incorrect": ("circle", 4.0, "hollow"),
    "crashed": ("diamond", 5.0, "hollow"),
    "timeout": ("triangle", 5.0, "hollow"),
    "static": ("cross", 4.0, "line"),
    "not-run": ("square", 3.5, "hollow"),
    "rejected": ("bar", 4.5, "filled"),
    "duplicate": ("circle", 2.6, "filled"),
    "migrant": ("square", 3.6, "filled"),
    "unknown": ("circle", 3.0, "hollow"),
}


def shape_path(shape: str, x: float, y: float, r: float) -> str:
    if shape == "circle":
        return f"M{x - r:g} {y:g}a{r:g} {r:g} 0 1 0 {2 * r:g} 0a{r:g} {r:g} 0 1 0 {-2 * r:g} 0"
    if shape == "diamond":
        return f"M{x:g} {y - r:g}L{x + r:g} {y:g}L{x:g} {y + r:g}L{x - r:g} {y:g}Z"
    if shape == "triangle":
        return f"M{x:g} {y - r:g}L{x + r:g} {y + r * 0.8:g}L{x - r:g} {y + r * 0.8:g}Z"
    if shape == "square":
        return f"M{x - r:g} {y - r:g}h{2 * r:g}v{2 * r:g}h{-2 * r:g}Z"
    if shape == "cross":
        return f"M{x - r:g} {y - r:g}l{2 * r:g} {2 * r:g}M{x - r:g} {y + r:g}l{2 * r:g} {-2 * r:g}"
    return f"M{x - r:g} {y - 1.5:g}h{2 * r:g}v3h{-2 * r:g}Z"  # bar


def island_css(n_islands: int) -> str:
    """Island colours (`.iK { --c: ... }`) and the legend filters (`.hide-OUTCOME`)."""
    rules = [f".i{k}{{--c:{PALETTE[k]}}}" for k in range(min(n_islands, len(PALETTE)))]
    rules += [f"#tree-svg.hide-{o} .o-{o}{{display:none}}" for o in OUTCOMES]
    return "".join(rules)


def icon(outcome: str, island: int = 0) -> str:
    shape, r, style = MARKERS[outcome]
    return (
        f'<svg width="16" height="16" viewBox="0 0 16 16"><path class="icon {style} '
        f'i{island % len(PALETTE)} o-{outcome}" d="{shape_path(shape, 8, 8, min(r, 6.5))}"/></svg>'
    )


def legend(counts: dict[str, int]) -> str:
    items = []
    for o, label in OUTCOMES.items():
        if not counts.get(o):
            continue
        items.append(
            f'<label><input type="checkbox" checked data-outcome="{esc(o)}"> {icon(o)} '
            f"{esc(label)} ({counts[o]})</label>"
        )
    return f'<div class="legend">{"".join(items)}</div>'


@dataclass
class TreeMarkup:
    svg: str
    positions: list[int]  # x0, y0, x1, y1, ... per program (pixels)
    width: int
    height: int


def _band(nodes: list[Node], n_islands: int) -> tuple[list[int], int]:
    islands = sorted({n.island for n in nodes} | set(range(n_islands)))
    slot = {isl: k for k, isl in enumerate(islands)}
    return [slot[n.island] for n in nodes], len(islands)


def tree_svg(nodes: list[Node], n_islands: int, best: int = -1) -> TreeMarkup:
    bands, n_bands = _band(nodes, n_islands)
    same = lambda n, p: bands[p] == bands[n.index]
    primary = [n.parents[0] if n.parents and same(n, n.parents[0]) else -1 for n in nodes]
    lay = layout_tree(bands, primary, n_bands)
    band_of_row = {}
    for b, (first, count) in enumerate(lay.band_rows):
        for row in range(first, first + count):
            band_of_row[row] = b

    def y_of_row(row: int) -> int:
        return TOP + row * DY + band_of_row[row] * BAND_GAP + DY // 2

    xs = [LEFT + c * DX + DX // 2 for c in lay.column]
    ys = [y_of_row(r) for r in lay.row]
    width = LEFT + len(nodes) * DX + 24
    height = TOP + lay.rows * DY + n_bands * BAND_GAP + 8
    out = [f'<svg id="tree-svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    labels = sorted({n.island for n in nodes} | set(range(n_islands)))
    for b, (first, count) in enumerate(lay.band_rows):
        top = TOP + first * DY + b * BAND_GAP
        if b % 2 == 0:
            out.append(
                f'<rect class="band" x="0" y="{top}" width="{width}" height="{count * DY}"/>'
            )
        out.append(f'<text class="band-label" x="6" y="{top + 12}">island {labels[b]}</text>')
    step = -(-48 // DX)  # a label every 48 pixels or more
    labelled = -step
    for c, n in enumerate(nodes):
        if c - labelled < step or (n.iteration < 0 and c > 0):
            continue
        labelled = c
        out.append(
            f'<text class="ruler" x="{xs[c]}" y="14" text-anchor="middle">'
            f"{'seed' if n.iteration < 0 else n.iteration}</text>"
        )
    index = {n.id: n.index for n in nodes}
    own: dict[int, list[str]] = {}
    second, across, stubs = [], [], []
    for n in nodes:
        i, x, y = n.index, xs[n.index], ys[n.index]
        for k, p in enumerate(n.parents):
            px, py = xs[p], ys[p]
            if k == 0 and primary[i] == p:
                if py == y:
                    seg = f"M{px} {py}H{x}"
                else:
                    seg = f"M{px} {py}H{x - DX // 2}L{x} {y}"
                own.setdefault(bands[i], []).append(seg)
            elif k == 0:
                across.append(f"M{px} {py}L{x} {y}")
            else:
                second.append(f"M{px} {py}L{x} {y}")
        if not n.parents and n.reused_from and n.kind == "seed":
            src = index.get(n.reused_from, -1)
            if 0 <= src < n.index:
                across.append(f"M{xs[src]} {ys[src]}L{x} {y}")
        if n.evicted:
            stubs.append(f"M{x - DX - 6} {y - 6}L{x} {y}")
    for b, segs in own.items():
        isl = labels[b] % len(PALETTE)
        out.append(f'<path class="edge" stroke="{PALETTE[isl]}" d="{"".join(segs)}"/>')
    if second:
        out.append(f'<path class="edge2" stroke="#6e7781" d="{"".join(second)}"/>')
    if across:
        out.append(f'<path class="xedge" d="{"".join(across)}"/>')
    if stubs:
        out.append(
            f'<path class="stub" d="{"".join(stubs)}"><title>parent no longer in the '
            "database</title></path>"
        )
    out.append('<path id="lineage" d=""/>')
    if best >= 0:
        out.append(
            f'<circle class="best-ring" cx="{xs[best]}" cy="{ys[best]}" r="10"/>'
            f'<text class="best-label" x="{xs[best]}" y="{ys[best] - 12}" '
            'text-anchor="middle">best</text>'
        )
    out.append('<g id="nodes">')
    for n in nodes:
        shape, r, style = MARKERS.get(n.outcome, MARKERS["unknown"])
        cls = f"n {style} o-{n.outcome} i{n.island % len(PALETTE)}"
        out.append(
            f'<path class="{cls}" data-i="{n.index}" '
            f'd="{shape_path(shape, xs[n.index], ys[n.index], r)}"/>'
        )
    out.append('</g><circle id="sel-ring" r="9" cx="0" cy="0" style="display:none"/></svg>')
    positions = [v for pair in zip(xs, ys) for v in pair]
    return TreeMarkup("".join(out), positions, width, height)
