"""The tree layout: programs never share a point, an edge never crosses a program on its
parent's lane, straight lines continue a lineage, and thousands of programs lay out at once."""

from __future__ import annotations

import bisect
import random
import time

import pytest

from evokernel.report.outcomes import classify
from evokernel.report.tree_layout import layout_tree


def _random_tree(n: int, bands: int, seed: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    band, parent = [], []
    for i in range(n):
        b = rng.randrange(bands)
        band.append(b)
        mine = [j for j in range(max(0, i - 60), i) if band[j] == b]
        parent.append(rng.choice(mine) if mine and rng.random() < 0.9 else -1)
    return band, parent


@pytest.mark.parametrize("seed", range(5))
def test_layout_is_collision_free_and_parent_lanes_stay_clear(seed):
    band, parent = _random_tree(800, 3, seed)
    lay = layout_tree(band, parent, 3)
    assert len(set(zip(lay.column, lay.row))) == len(band)
    for i, b in enumerate(band):  # each band's rows are its own
        first, count = lay.band_rows[b]
        assert first <= lay.row[i] < first + count
    by_row: dict[int, list[int]] = {}
    for i, r in enumerate(lay.row):
        by_row.setdefault(r, []).append(i)
    last_child: dict[int, int] = {}
    for i, p in enumerate(parent):
        if p >= 0:
            last_child[p] = i
    for i, p in enumerate(parent):
        if p < 0:
            continue
        # The edge runs along the parent's row up to the child: nothing else sits there.
        row = by_row[lay.row[p]]
        after = row[bisect.bisect_right(row, p)] if bisect.bisect_right(row, p) < len(row) else None
        assert after is None or after >= i
        if last_child[p] == i:
            assert lay.row[i] == lay.row[p], "the last child continues its parent's lane"


def test_layout_of_thousands_is_fast_and_reuses_lanes():
    band, parent = _random_tree(20000, 4, 9)
    start = time.perf_counter()
    lay = layout_tree(band, parent, 4)
    assert time.perf_counter() - start < 2.0
    assert lay.rows < 400  # lanes are reused once a branch ends


def test_a_parent_named_after_its_child_is_refused():
    with pytest.raises(ValueError, match="later parent"):
        layout_tree([0, 0], [1, -1], 1)


@pytest.mark.parametrize(
    ("status", "reasons", "fitness", "parent", "expected"),
    [
        ("ok", [], 1.2, 1.1, "improved"),
        ("ok", [], 1.1, 1.1, "correct"),
        ("ok", [], None, 1.1, "correct"),
        ("ok", [], float("nan"), 1.0, "correct"),
        ("failed", ["mismatch: rel_l2 0.5"], None, 1.0, "incorrect"),
        ("failed", ["mismatch: x", "timeout: 30 s"], None, 1.0, "timeout"),
        ("failed", ["crashed: SIGSEGV"], None, 1.0, "crashed"),
        ("failed", ["exception: RuntimeError"], None, 1.0, "crashed"),
        ("failed", ["static: import ctypes", "crashed: x"], None, 1.0, "static"),
        ("failed", ["infrastructure: no GPU"], None, 1.0, "not-run"),
        ("failed", [], None, 1.0, "incorrect"),
        ("rejected", ["no program"], None, 1.0, "rejected"),
        ("duplicate", [], 1.3, 1.0, "duplicate"),
        ("weird", [], None, None, "unknown"),
    ],
)
def test_outcome_of_a_program(status, reasons, fitness, parent, expected):
    assert classify(status, reasons, fitness, parent) == expected


def test_seeds_and_migrants_keep_their_own_marks():
    assert classify("ok", [], 1.0, None, seed=True) == "seed"
    assert classify("failed", ["exception: boom"], None, None, seed=True) == "crashed"
    assert classify("ok", [], 2.0, 1.0, migrant=True) == "migrant"
