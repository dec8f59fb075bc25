"""Places the evolution tree: time runs left to right, islands are horizontal bands.

Input: the programs in commit order, each with its band (island) and its primary parent (the
index of its first parent, or -1 when the parent is on another island, is evicted, or there is
none). Output: each program's column (its position in commit order, so a child always lies
right of its parents) and its row.

Rows are lanes, as in a version-control graph. A program reserves its lane from its own column
to the column of its last child on the same island; that last child continues the lane (a
straight line), the other children branch off into the lowest lane free at their column. So
no two programs share a point, an edge from a parent runs along the parent's own reserved
lane, and lanes are reused once a branch ends. O(n log n) in the number of programs.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class TreeLayout:
    column: list[int]  # per program: its position in commit order
    row: list[int]  # per program: its global row (band offset + lane)
    band_rows: list[tuple[int, int]]  # per band: (first row, number of rows)
    rows: int  # total rows


def layout_tree(bands: Sequence[int], parents: Sequence[int], n_bands: int) -> TreeLayout:
    """`bands[i]` in [0, n_bands); `parents[i]` < i, or -1 (a root of its band)."""
    n = len(bands)
    last_child = [-1] * n  # the last same-band child of each program
    for i, p in enumerate(parents):
        if p >= 0:
            if p >= i:
                raise ValueError(f"program {i} names a later parent {p}")
            if bands[p] == bands[i]:
                last_child[p] = i
    lanes = [0] * n
    # Per band: each lane's latest reservation number; a heap of (reserved until, lane,
    # reservation), whose stale entries (the lane was taken over since) are skipped; free lanes.
    version: list[list[int]] = [[] for _ in range(n_bands)]
    taken: list[list[tuple[int, int, int]]] = [[] for _ in range(n_bands)]
    free: list[list[int]] = [[] for _ in range(n_bands)]
    for i in range(n):
        b = bands[i]
        heap, ver = taken[b], version[b]
        while heap and heap[0][0] < i:
            _, lane, v = heapq.heappop(heap)
            if ver[lane] == v:
                heapq.heappush(free[b], lane)
        p = parents[i]
        if p >= 0 and bands[p] == b and last_child[p] == i:
            lane = lanes[p]
        elif free[b]:
            lane = heapq.heappop(free[b])
        else:
            lane = len(ver)
            ver.append(0)
        lanes[i] = lane
        ver[lane] += 1
        heapq.heappush(heap, (max(i, last_child[i]), lane, ver[lane]))
    band_rows = []
    first = 0
    for b in range(n_bands):
        count = max(1, len(version[b]))
        band_rows.append((first, count))
        first += count
    rows = [band_rows[bands[i]][0] + lanes[i] for i in range(n)]
    return TreeLayout(column=list(range(n)), row=rows, band_rows=band_rows, rows=first)
