"""A synthetic run of thousands of programs, written through the real `Database` (the search
itself would take too long in a test): four islands, parents drawn from each island's recent
correct programs, crossovers, migrants, every kind of failure, results with timed scenarios."""

from __future__ import annotations

import random
import time
from pathlib import Path

from timed_run import SCENARIOS, SEED, scripted_result

from evokernel.evolve import fitness as fit
from evokernel.evolve.database import Database, Program
from evokernel.evolve.types import code_digest
from evokernel.tasks import blocks

FAILS = [
    "mismatch: rel_l2 0.3 > 0.01",
    "timeout: exceeded 30 s",
    "crashed: signal SIGSEGV",
    "static: forbidden construct",
]


def large_run(out: Path, count: int, islands: int = 4, seed: int = 0) -> Path:
    rng = random.Random(seed)
    out.mkdir(parents=True)
    db = Database.create(out / "programs.sqlite")
    start = time.time() - count * 2.0
    db.commit(
        meta={
            "schema_version": 1,
            "name": "toy_kernel",
            "device": "cuda",
            "islands": islands,
            "scenarios": SCENARIOS,
            "seed_code": SEED,
            "fitness_label": fit.fitness_label("cuda"),
            "iterations_target": count,
            "created": start,
            "sessions": [
                {"started": start, "ended": start + count * 2.0 + 5, "stop_reason": "iterations"}
            ],
            "state": {"finished": True, "stop_reason": "iterations"},
        }
    )
    knobs = blocks.parse_knobs(SEED)
    pool: list[list[Program]] = [[] for _ in range(islands)]
    batch: list[tuple[Program, str | None]] = []

    def row(pid: str, k: int, island: int, parents: tuple[str, ...], code: str, **kw) -> Program:
        p = Program(
            id=pid,
            iteration=k,
            island=island,
            generation=0,
            parent_ids=parents,
            kind=kw.pop("kind", "offline:knob"),
            description=kw.pop("description", ""),
            status=kw.pop("status", "ok"),
            code=code,
            code_hash=code_digest(code) if code else "",
            visible_at=k + 1,
            created_at=start + 2.0 * (k + 1),
            **kw,
        )
        return p

    def evaluated(p: Program) -> tuple[Program, str | None]:
        result = scripted_result(p.code)
        if result.correct:
            p.status, p.fitness = "ok", fit.kernel_fitness(result, "cuda")
            p.regimes = fit.regime_speedups(result)
        else:
            p.status, p.reasons = "failed", tuple(result.reasons)
        p.eval_wall_s = 9.0
        return p, result.to_json()

    seed = evaluated(row("seed", -1, 0, (), SEED, kind="seed"))
    batch.append(seed)
    pool[0].append(seed[0])
    for i in range(1, islands):
        copy = row(f"seed@{i}", -1, i, (), SEED, kind="seed", reused_from="seed")
        copy.status, copy.fitness = "ok", seed[0].fitness
        batch.append((copy, None))
        pool[i].append(copy)
    for k in range(count):
        island = k % islands
        parent = rng.choice(pool[island][-12:])
        if k and k % 200 == 0:  # a migrant from the previous island
            src = pool[(island - 1) % islands][-1]
            m = row(
                f"{src.id}@{island}",
                k,
                island,
                (src.id,),
                src.code,
                kind="migrant",
                reused_from=src.reused_from or src.id,
                migrant=True,
            )
            m.status, m.fitness = src.status, src.fitness
            batch.append((m, None))
            pool[island].append(m)
        knob = rng.choice(knobs[:2])
        code = blocks.set_knobs(parent.code, {knob.name: rng.choice(knob.choices)})
        parents: tuple[str, ...] = (parent.id,)
        if k % 17 == 5:
            other = rng.choice(pool[(island + 1) % islands][-12:])
            parents = (parent.id, other.id)
        pid = f"p{k:05d}"
        if k % 23 == 7:
            p = row(pid, k, island, parents, "", status="rejected", reasons=("no program",))
            batch.append((p, None))
        else:
            mode = {3: 1, 8: 2, 13: 3, 18: 4}.get(k % 25, 0)
            code = blocks.set_knobs(code, {"MODE": mode})
            p, result = evaluated(row(pid, k, island, parents, code, kind="offline:knob"))
            batch.append((p, result))
            if p.status == "ok":
                pool[island].append(p)
        if len(batch) >= 200:
            db.commit(batch)
            batch = []
    db.commit(batch)
    db.close()
    return out
