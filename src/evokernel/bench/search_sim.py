"""Replay the search on a knob landscape instead of a GPU: which search settings find the best
knob setting of a seed within a quarter of its knob space.

    python -m evokernel.bench.search_sim [--tasks decode_linear,gqa_decode_attention]
        [--landscape OUT/evolve_bench.json] [--runs 20] [--json PATH]

A landscape gives every knob setting of a task's seed a speedup lower bound per public
scenario (the fitness is their geometric mean, as in `evolve.fitness`). Two sources:

  measured   the `programs` of the exhaustive arm in an `evolve_bench` JSON (a GPU run), used
             when it covers the whole knob space;
  synthetic  drawn per run from a seed: for every scenario, a smooth single-peaked effect of
             each knob along its declared values, pairwise interactions and per-setting noise,
             in log space. A model of what GPU sweeps show, not a measurement.

Each run drives the real controller, mutators and database (the offline search exactly as
`evolve_bench` configures it) with a problem whose evaluation is a table look-up, for a
quarter of the space's evaluations. Per search setting the report gives the median and worst
share of the landscape's best fitness reached, and the share of runs reaching 98%.
Nothing here is timed: it compares search strategies, never kernels.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from evokernel.evaluate.result import DeviceInfo, EvalResult, ScenarioResult, TimingStats
from evokernel.evolve import fitness as fit
from evokernel.evolve.config import config_from_dict
from evokernel.evolve.llm.accounting import Accounting
from evokernel.evolve.mutators.registry import build_mutators
from evokernel.evolve.session import create_session
from evokernel.tasks import blocks, get_task

GOAL = 0.98
# Search settings compared: the `mutators` config section (everything else as evolve_bench's
# offline arm).
SETTINGS: dict[str, dict[str, Any]] = {
    "knob moves": {"offline": {"model_prob": 0.0}},
    "knob moves+crossover 0.25": {
        "weights": {"offline": 0.75, "crossover": 0.25},
        "offline": {"model_prob": 0.0},
    },
    "model 0.25": {"offline": {"model_prob": 0.25}},
    "model 0.5": {"offline": {"model_prob": 0.5}},
    "model 0.75 (default)": {"offline": {"model_prob": 0.75}},
    "model 1.0": {"offline": {"model_prob": 1.0}},
}

Landscape = dict[tuple[Any, ...], dict[str, float]]  # knob values (declared order) -> lowers


def synthetic(task: str, seed: int) -> Landscape:
    """Per scenario: log lower bound = base + sum of single-peaked knob effects + pairwise
    interactions + noise."""
    rng = random.Random(seed)
    source = get_task(task).seed_candidate.read_text()
    knobs = blocks.parse_knobs(source)
    scenarios = [s.name for s in get_task(task).scenarios("cuda")]
    land: Landscape = {}
    params = {}
    for s in scenarios:
        peaks = {k.name: rng.uniform(0, len(k.choices) - 1) for k in knobs}
        widths = {k.name: rng.uniform(0.1, 0.5) for k in knobs}
        inter = {
            (a.name, b.name, i, j): rng.gauss(0, 0.04)
            for x, a in enumerate(knobs)
            for b in knobs[x + 1 :]
            for i in range(len(a.choices))
            for j in range(len(b.choices))
        }
        params[s] = (rng.gauss(-0.2, 0.3), peaks, widths, inter)
    for values in blocks.knob_space(source):
        index = {k.name: k.choices.index(values[k.name]) for k in knobs}
        lowers = {}
        for s in scenarios:
            base, peaks, widths, inter = params[s]
            log = base - sum(
                widths[n] * ((index[n] - peaks[n]) / max(1, len(k.choices) - 1)) ** 2 * 4
                for k in knobs
                for n in [k.name]
            )
            log += sum(
                inter[(a.name, b.name, index[a.name], index[b.name])]
                for x, a in enumerate(knobs)
                for b in knobs[x + 1 :]
            )
            log += rng.gauss(0, 0.02)
            lowers[s] = math.exp(log)
        land[tuple(values[k.name] for k in knobs)] = lowers
    return land


def measured(task: str, bench: Path) -> Landscape | None:
    """The exhaustive arm's programs of `task` in an evolve_bench JSON, when complete."""
    report = json.loads(bench.read_text())
    source = get_task(task).seed_candidate.read_text()
    names = [k.name for k in blocks.parse_knobs(source)]
    for t in report.get("tasks", []):
        if t["task"] != task:
            continue
        programs = t["exhaustive"].get("programs", [])
        land = {
            tuple(p["knobs"][n] for n in names): p["lower"] if p["fitness"] is not None else {}
            for p in programs
        }
        return land if len(land) == blocks.knob_space_size(source) else None
    return None


class TableProblem:
    """A kernel task whose evaluation looks the program's knob values up in a landscape."""

    def __init__(self, task: str, land: Landscape):
        t = get_task(task)
        self.name, self.device, self.seed_code = t.name, "cuda", t.seed_candidate.read_text()
        self.interface, self.description = t.interface, t.description
        public = t.scenarios("cuda")
        self.scenarios = [(s.name, s.regime) for s in public]
        self.regimes = list(dict.fromkeys(s.regime for s in public))
        self.timed, self.fitness_kind = True, "speedup"
        self.fitness_label = fit.fitness_label("cuda")
        self.names = [k.name for k in blocks.parse_knobs(self.seed_code)]
        self.land = land
        self.screens = False  # the landscape holds whole evaluations: no cascade

    def job(self, code: str, promote_above: float | None = None) -> Any:
        raise NotImplementedError("a table landscape is looked up in this process only")

    def evaluate(
        self, code: str, *, gpu: int = 0, promote_above: float | None = None
    ) -> EvalResult:
        values = blocks.knob_values(code)
        lowers = self.land.get(tuple(values[n] for n in self.names), {})
        stats = TimingStats(median_us=1.0, p5_us=1.0, p95_us=1.0, n=1, outliers_dropped=0)
        scenarios = [
            ScenarioResult(
                name=name,
                regime=regime,
                params={},
                dtype="bfloat16",
                candidate=stats,
                baselines={"baseline": stats},
                baseline="baseline",
                speedup=lowers[name],
                speedup_ci=(lowers[name], lowers[name]),
                bytes_moved=0,
                achieved_gbps=0.0,
                roofline_us=0.0,
                pct_roofline=0.0,
                host_event_ratio=1.0,
            )
            for name, regime in self.scenarios
            if name in lowers
        ]
        return EvalResult(
            task=self.name,
            candidate="table",
            correct=bool(lowers),
            reasons=[] if lowers else ["mismatch: failed when measured"],
            stage="done",
            device=DeviceInfo(kind="cuda", name="table", torch="", triton=""),
            timing_label="table look-up",
            scenarios=scenarios,
        )

    def fitness(self, result: EvalResult) -> float | None:
        return fit.kernel_fitness(result, "cuda")

    def features(self, result: EvalResult) -> dict[str, float]:
        return {}

    def label_for(self, seed: EvalResult) -> str:
        return self.fitness_label

    def regime_speedups(self, result: EvalResult) -> dict[str, float]:
        return fit.regime_speedups(result)

    def hardware(self, result: EvalResult | None) -> dict[str, Any]:
        return {"device": "table"}

    def spec(self) -> dict[str, Any]:
        return {"kind": "table", "task": self.name}


def best_fitness(land: Landscape) -> float:
    return max(fit.geomean(v.values()) for v in land.values() if v)


def search_once(task: str, land: Landscape, mutators: dict[str, Any], seed: int) -> float:
    """Best fitness the offline search reaches in a quarter of the space's evaluations."""
    problem = TableProblem(task, land)
    evals = max(1, len(land) // 4)
    cfg = config_from_dict(
        {
            "seed": seed,
            "in_flight": 2,
            "islands": {"count": 2, "migration_interval": 2, "migration_count": 1},
            "selection": {"exploit": 0.8, "explore": 0.1, "random": 0.1},
            "budget": {"iterations": evals - 1},
            "checkpoint": {"write_sources": False},
            "mutators": mutators,
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        session = create_session(Path(tmp) / "run", problem, cfg)
        try:
            m = cfg.mutators
            chosen = build_mutators(m.weights, None, m.offline, None, Accounting())
            session.execute(mutators=chosen, stream=io.StringIO(), live=False)
            found = [
                p.fitness for p in session.db.programs if p.evaluated_here and p.fitness is not None
            ]
        finally:
            session.close()
    return max(found) if found else 0.0


def compare(task: str, runs: int, bench: Path | None, first_seed: int = 0) -> dict[str, Any]:
    fixed = measured(task, bench) if bench else None
    rows: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for run in range(runs):
        land = fixed or synthetic(task, first_seed + run)
        top = best_fitness(land)
        for name, mutators in SETTINGS.items():
            rows[name].append(search_once(task, land, mutators, seed=run) / top)
    return {
        "task": task,
        "landscape": "measured" if fixed else "synthetic",
        "runs": runs,
        "settings": {
            name: {
                "median": statistics.median(shares),
                "worst": min(shares),
                "reach_goal": sum(s >= GOAL for s in shares) / len(shares),
            }
            for name, shares in rows.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="search_sim", description=__doc__.split("\n")[0])
    p.add_argument("--tasks", default="decode_linear,gqa_decode_attention")
    p.add_argument("--landscape", type=Path, default=None, help="an evolve_bench JSON")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument(
        "--first-seed", type=int, default=0, help="seed of the first synthetic landscape"
    )
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    report = [compare(t, args.runs, args.landscape, args.first_seed) for t in tasks]
    for r in report:
        print(f"{r['task']} ({r['landscape']} landscape, {r['runs']} runs, 25% of the space):")
        for name, s in r["settings"].items():
            print(
                f"  {name:<26} median {100 * s['median']:5.1f}%  worst {100 * s['worst']:5.1f}%"
                f"  runs reaching {100 * GOAL:.0f}%: {100 * s['reach_goal']:.0f}%"
            )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
