"""Islands, their MAP-Elites grids, parent choice and migration: pure functions of the rows.

`Population(programs, n_islands, cutoff)` is the search as the proposal of iteration `cutoff`
sees it: the member rows (evaluated programs, seeds and migrants) whose `visible_at` is at most
`cutoff`. Because it is rebuilt from committed rows only, the same rows give the same choices,
whatever order evaluations finished in or how often the run was resumed.

Invariants (tested in tests/evolve/test_islands.py):
  * a parent is always a correct program of the island it is chosen for;
  * a cell's elite is the best program ever placed in the cell (fitness, then earliest
    iteration, then id), so it is displaced only by a strictly better one and never lost;
  * the global best is the best correct program of all islands, under the same order;
  * migration copies each island's top `count` distinct programs to the next island on the
    ring, skipping code the target island already holds.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from evokernel.evolve.config import SelectionConfig
from evokernel.evolve.database import Program


def rank_key(p: Program) -> tuple[float, int, str]:
    """Sort key: higher fitness first, then the earlier program, then the id."""
    return (-(p.fitness if p.fitness is not None else float("-inf")), p.iteration, p.id)


def distinct(programs: Iterable[Program]) -> list[Program]:
    """First program of each code hash, order kept."""
    seen: set[str] = set()
    out = []
    for p in programs:
        if p.code_hash not in seen:
            seen.add(p.code_hash)
            out.append(p)
    return out


@dataclass(frozen=True)
class Choice:
    parent: Program
    mode: str  # exploit | explore | random


class Population:
    def __init__(self, programs: Iterable[Program], n_islands: int, cutoff: int | None = None):
        self.n_islands = n_islands
        self.members = [
            p for p in programs if p.member and (cutoff is None or p.visible_at <= cutoff)
        ]
        self._islands: list[list[Program]] = [[] for _ in range(n_islands)]
        for p in self.members:
            self._islands[p.island].append(p)

    def island(self, i: int) -> list[Program]:
        """Member rows of island `i` (correct or not), in commit order."""
        return self._islands[i]

    def ranked(self, i: int) -> list[Program]:
        """Correct programs of island `i`, best first."""
        return sorted((p for p in self._islands[i] if p.correct), key=rank_key)

    def grid(self, i: int) -> dict[tuple[int, ...], Program]:
        """Cell -> elite of island `i`."""
        elites: dict[tuple[int, ...], Program] = {}
        for p in self.ranked(i):
            elites.setdefault(p.cell, p)
        return elites

    def best(self) -> Program | None:
        correct = [p for p in self.members if p.correct]
        return min(correct, key=rank_key) if correct else None

    def archive(self, n: int) -> list[Program]:
        """The `n` best distinct programs of all islands."""
        return distinct(sorted((p for p in self.members if p.correct), key=rank_key))[:n]

    def holds(self, island: int, code_hash: str) -> bool:
        return any(p.code_hash == code_hash for p in self._islands[island])

    # --- choices ---------------------------------------------------------------------------
    def select_parent(self, island: int, rng: random.Random, cfg: SelectionConfig) -> Choice:
        ranked = self.ranked(island)
        if not ranked:
            raise RuntimeError(f"island {island} holds no correct program")
        draw = rng.random()
        if draw < cfg.exploit:
            pool = distinct(ranked)[: cfg.elite_pool]
            return Choice(rng.choice(pool), "exploit")
        if draw < cfg.exploit + cfg.explore:
            grid = self.grid(island)
            cell = rng.choice(sorted(grid))
            return Choice(grid[cell], "explore")
        return Choice(rng.choice(ranked), "random")

    def inspirations(self, parent: Program, rng: random.Random, n: int) -> list[Program]:
        """Up to `n` programs other than the parent's code: the island's best, then elites
        of other islands' grids (diversity for prompts and crossover), then the global best."""
        if n <= 0:
            return []
        chosen: list[Program] = []
        seen = {parent.code_hash}

        def take(p: Program) -> None:
            if len(chosen) < n and p.code_hash not in seen:
                seen.add(p.code_hash)
                chosen.append(p)

        for p in distinct(self.ranked(parent.island))[: max(1, n // 2)]:
            take(p)
        others = [i for i in range(self.n_islands) if i != parent.island]
        rng.shuffle(others)
        for i in others:
            grid = self.grid(i)
            if grid:
                take(grid[rng.choice(sorted(grid))])
        best = self.best()
        if best is not None:
            take(best)
        return chosen

    def migration(self, count: int) -> list[tuple[Program, int]]:
        """(program, target island) pairs: each island's top `count` distinct correct
        programs go to the next island on the ring, unless the target holds that code."""
        if self.n_islands < 2 or count <= 0:
            return []
        moves = []
        for source in range(self.n_islands):
            target = (source + 1) % self.n_islands
            for p in distinct(self.ranked(source))[:count]:
                if not self.holds(target, p.code_hash):
                    moves.append((p, target))
        return moves
