"""What an evaluation will run, decided in the parent from the (hidden) seed: the correctness
jobs and, per public scenario, the timing schedule. Every seed is derived from the evaluation's
seed with `derive_seed`, so the parent can rebuild the exact inputs of any call the worker made.

Correctness jobs, in order: each public scenario with `input_sets` input sets in the timed
dtype (the first also re-called after `task.perturb`, which catches results cached on pointers)
and one set in every other dtype of the device; then each hidden scenario with one set in the
timed dtype. Input sets differ by seed, and the task draws its distribution and its junk kind
from the seed, so several sets cover several distributions.

Every job calls the candidate twice on the same inputs (outputs must agree: races, reads of
uninitialised memory) on CUDA. The CPU interpreter runs programs one after another, so a race
cannot show there: on the CPU only the first input set of each public scenario is repeated,
which keeps the check (and its hostile test) at half the interpreter time.

Timing schedule: `warmup` + `reps` rounds, each a random order of the implementations; the
inputs rotate among `copies` clones of one or two input sets, enough that the bytes touched
between two uses of one copy exceed the L2 cache three times (at most 4 GiB of copies).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch

from evokernel.errors import TaskError
from evokernel.evaluate.options import EvalOptions
from evokernel.evaluate.protocol import Check, Time
from evokernel.tasks.base import Scenario, Task
from evokernel.tasks.rng import derive_seed

L2_FACTOR = 3
L2_UNKNOWN = 64 * 2**20  # when the device does not say (H100 and H200 have 50 MiB)
COPIES_MAX_BYTES = 4 * 2**30
COPIES_MAX = 4096
TWO_BASES_BELOW = 64 * 2**20  # bigger inputs are built once (CPU generation is the cost)


@dataclass(frozen=True)
class CheckJob:
    scenario: Scenario
    label: str  # the scenario's name, or "hidden scenario N"
    dtype: torch.dtype
    seed: int
    perturb_seed: int | None
    note: str
    repeat: bool = True  # call twice on the same inputs and compare

    def request(self, hidden_seed: int) -> Check:
        return Check(
            scenario=self.scenario.name,
            hidden_seed=hidden_seed if self.scenario.hidden else None,
            seed=self.seed,
            dtype=str(self.dtype),
            perturb_seed=self.perturb_seed,
            repeat=self.repeat,
        )


@dataclass(frozen=True)
class TimingPlan:
    scenario: Scenario
    dtype: torch.dtype
    rounds: list[list[str]]
    timed_from: int
    recheck: list[int]
    base_seeds: list[int]
    copies: int
    perturb_seed: int
    profile_seed: int
    fns: list[str] = field(default_factory=list)

    def request(self) -> Time:
        return Time(
            scenario=self.scenario.name,
            dtype=str(self.dtype),
            rounds=self.rounds,
            timed_from=self.timed_from,
            recheck=self.recheck,
            base_seeds=self.base_seeds,
            copies=self.copies,
            perturb_seed=self.perturb_seed,
        )

    def base_of(self, counter: int) -> int:
        """Index into base_seeds of the inputs the `counter`-th call saw."""
        return (counter % self.copies) % len(self.base_seeds)


def public_scenarios(task: Task, device: str, options: EvalOptions) -> list[Scenario]:
    scenarios = task.scenarios(device)
    if options.scenarios is None:
        return scenarios
    known = {s.name: s for s in scenarios}
    missing = [n for n in options.scenarios if n not in known]
    if missing:
        raise TaskError(
            f"task {task.name} has no public scenario {', '.join(missing)} on {device} "
            f"(known: {', '.join(known)})"
        )
    return [known[n] for n in options.scenarios]


def warm_scenarios(task: Task, device: str, options: EvalOptions) -> tuple[str, ...]:
    """The timed scenarios whose baselines a GPU worker calls once while it starts (pool.Spec):
    per-shape library set-up then costs a spare's time, not an evaluation's."""
    if device != "cuda":
        return ()
    return tuple(s.name for s in public_scenarios(task, device, options))


def hidden_seed(seed: int) -> int:
    return derive_seed(seed, "hidden")


def check_jobs(task: Task, device: str, options: EvalOptions, seed: int) -> list[CheckJob]:
    dtypes = task.dtypes[device]
    cuda = device == "cuda"
    jobs = []
    for scenario in public_scenarios(task, device, options):
        for j in range(options.input_sets):
            jobs.append(
                CheckJob(
                    scenario,
                    scenario.name,
                    dtypes[0],
                    derive_seed(seed, "check", scenario.name, str(dtypes[0]), j),
                    derive_seed(seed, "check-perturb", scenario.name) if j == 0 else None,
                    f"input set {j + 1}",
                    repeat=cuda or j == 0,
                )
            )
        for dtype in dtypes[1:]:
            jobs.append(
                CheckJob(
                    scenario,
                    scenario.name,
                    dtype,
                    derive_seed(seed, "check", scenario.name, str(dtype), 0),
                    None,
                    "input set 1",
                    repeat=cuda,
                )
            )
    if options.hidden:
        for i, scenario in enumerate(task.hidden_scenarios(device, hidden_seed(seed))):
            jobs.append(
                CheckJob(
                    scenario,
                    f"hidden scenario {i + 1}",
                    dtypes[0],
                    derive_seed(seed, "check", scenario.name, str(dtypes[0]), 0),
                    None,
                    "",
                    repeat=cuda,
                )
            )
    return jobs


def copies_for(rotating_bytes: int, l2_bytes: int, device: str) -> int:
    if device != "cuda":
        return 2
    per_copy = max(1, rotating_bytes)
    l2 = l2_bytes or L2_UNKNOWN
    want = math.ceil(L2_FACTOR * l2 / per_copy) + 1
    fit = max(2, COPIES_MAX_BYTES // per_copy)
    return max(2, min(want, fit, COPIES_MAX))


def graph_copies(copies: int, task: Task, device: str) -> int:
    """Copies for a graph-timed task (`task.graph_layers` = L on a GPU): a multiple of L, at
    least L, so that a graph of L consecutive calls never uses one copy twice and the graphs
    start at a few offsets only (a replay consumes L copies)."""
    layers = task.graph_layers if device == "cuda" else 0
    if layers <= 0:
        return copies
    return max(layers, -(-copies // layers) * layers)


def timing_plan(
    task: Task,
    scenario: Scenario,
    device: str,
    options: EvalOptions,
    seed: int,
    l2_bytes: int,
    with_candidate: bool,
) -> TimingPlan:
    dtype = task.dtypes[device][0]
    fns = [f"baseline:{name}" for name in task.baselines(scenario)]
    if with_candidate:
        fns.insert(0, "candidate")
    rng = random.Random(derive_seed(seed, "schedule", scenario.name))
    assert options.warmup is not None and options.reps is not None
    rounds = []
    for _ in range(options.warmup + options.reps):
        order = list(fns)
        rng.shuffle(order)
        rounds.append(order)
    recheck = sorted(rng.sample(range(options.reps), min(options.recheck, options.reps)))
    rotating = task.rotating_bytes(scenario, dtype)
    bases = 2 if rotating < TWO_BASES_BELOW else 1
    return TimingPlan(
        scenario=scenario,
        dtype=dtype,
        rounds=rounds,
        timed_from=options.warmup,
        recheck=recheck if with_candidate else [],
        base_seeds=[derive_seed(seed, "timing", scenario.name, j) for j in range(bases)],
        copies=graph_copies(copies_for(rotating, l2_bytes, device), task, device),
        perturb_seed=derive_seed(seed, "perturb", scenario.name),
        profile_seed=derive_seed(seed, "profile", scenario.name),
        fns=fns,
    )
