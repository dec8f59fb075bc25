"""The timing phase of one evaluation, driven from the parent (session.CandidateRun's worker).

Scenarios are timed in batches (with a cascade, cascade.py: the screen scenarios, then the
rest only when promoted; without one, all public scenarios), in the timed dtype. Per batch:

  1. the timing inputs of its scenarios are built under the device's shared lock (`Prepare`,
     as many at once as fit in `PREPARED_BYTES`);
  2. their timed rounds run back to back under one exclusive hold (`Time`: no other timing,
     no correctness job, no worker start-up of this evaluator on that GPU meanwhile), so an
     evaluation waits for the device once per batch, not once per scenario;
  3. per scenario, the host/event cross-check is judged (figures.timer_problems) and, on CUDA,
     a profiler pass runs (`Profile`, under the shared lock: it lists kernels and streams and
     times nothing that is compared).

The outputs of the sampled timed calls are re-checked against references the parent rebuilds
from the seeds (a helper thread, while the worker goes on). Figures (speedup, roofline, flags)
come from the raw times and the clean calibration (figures.scenario_result).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import torch

from evokernel.evaluate import protocol as p
from evokernel.evaluate.calibration import Calibration
from evokernel.evaluate.cascade import decide, screen_scenarios
from evokernel.evaluate.compare import Case, judge
from evokernel.evaluate.figures import profile_problems, scenario_result, timer_problems
from evokernel.evaluate.locks import DeviceSlot
from evokernel.evaluate.options import EvalOptions
from evokernel.evaluate.plan import TimingPlan, public_scenarios, timing_plan
from evokernel.evaluate.process.launch import WorkerProcess
from evokernel.evaluate.result import EvalResult
from evokernel.evaluate.static import triton_kernels
from evokernel.evaluate.stop import Stop
from evokernel.reasons import reason
from evokernel.tasks.base import Scenario, Task
from evokernel.tasks.rng import derive_seed

R = TypeVar("R", bound=p.Message)


class CandidateRun(Protocol):
    """What the timing phase reads and writes of the evaluation it belongs to
    (session.py's CandidateRun, which starts this phase)."""

    task: Task
    source: str
    device: str
    cuda: bool
    options: EvalOptions
    seed: int
    slot: DeviceSlot
    calibration: Callable[[], Calibration] | None
    result: EvalResult
    facts: p.DeviceFacts | None
    helper: ThreadPoolExecutor
    build_device: str  # where the parent rebuilds inputs

    def count(self, name: str, seconds: float) -> None: ...

    def shared(self, kind: str) -> AbstractContextManager[None]: ...

    def building(self) -> AbstractContextManager[None]: ...

    def add(self, lines: list[str] | str | None) -> None: ...

    def reply(self, worker: WorkerProcess, message: p.Message, expect: type[R]) -> R: ...


PROFILE_CALLS = 3
PREPARED_BYTES = 4 * 2**30  # timing inputs one worker holds on the device at once


class TimingPhase:
    def __init__(self, run: CandidateRun, worker: WorkerProcess) -> None:
        self.run_, self.worker = run, worker
        self.kernels = triton_kernels(run.source)
        self.listing: dict[str, Any] = {}
        self.spins: dict[str, float] = {}
        self.copies: dict[str, int] = {}

    def run(self) -> None:
        run = self.run_
        run.result.stage = "timing"
        public = public_scenarios(run.task, run.device, run.options)
        cascade = run.options.cascade
        first, rest = public, []
        if cascade is not None:
            first = screen_scenarios(cascade, public)
            rest = [s for s in public if s not in first]
        screened = self._batch(first)
        if cascade is not None and not run.result.reasons:
            promoted, note = decide(cascade, screened)
            run.result.artifacts["cascade"] = note
            if not promoted:
                run.result.stage = "screened"
                rest = []
        if rest and not run.result.reasons:
            self._batch(rest)
        if self.listing:
            run.result.artifacts["kernels"] = json.dumps(self.listing)
        if self.spins:
            run.result.artifacts["timing"] = json.dumps(
                {"spin_us": self.spins, "input_copies": self.copies}
            )

    def _batch(self, scenarios: list[Scenario]) -> list[Any]:
        """Time `scenarios`, re-check their sampled outputs, add their figures."""
        run = self.run_
        l2 = run.facts.l2_bytes if run.facts is not None else 0
        plans = [
            timing_plan(run.task, s, run.device, run.options, run.seed, l2, True) for s in scenarios
        ]
        raw: list[tuple[TimingPlan, p.Timed]] = []
        pending: list[tuple[TimingPlan, Future]] = []
        for group in self._groups(plans):
            for plan, timed in self._time(group):
                raw.append((plan, timed))
                pending.append((plan, run.helper.submit(self._recheck_refs, plan, timed)))
        asked = time.monotonic()
        for plan, future in pending:
            self._recheck(plan, future)
        run.count("reference_wait", time.monotonic() - asked)
        return self._figures(raw)

    def _groups(self, plans: list[TimingPlan]) -> list[list[TimingPlan]]:
        """Consecutive plans whose timing inputs fit in PREPARED_BYTES together (one at least)."""
        groups: list[list[TimingPlan]] = []
        held = 0
        for plan in plans:
            size = plan.copies * self.run_.task.rotating_bytes(plan.scenario, plan.dtype)
            if not groups or held + size > PREPARED_BYTES:
                groups.append([])
                held = 0
            groups[-1].append(plan)
            held += size
        return groups

    def _time(self, plans: list[TimingPlan]) -> list[tuple[TimingPlan, p.Timed]]:
        """Prepare every plan (shared), time them back to back (one exclusive hold), then judge
        and profile each (shared)."""
        run, worker = self.run_, self.worker
        for plan in plans:
            with run.shared("prepare"):
                run.reply(worker, p.Prepare(timing=plan.request()), p.Prepared)
        done: list[tuple[TimingPlan, p.Timed]] = []
        asked = time.monotonic()
        with run.slot.exclusive():
            got = time.monotonic()
            try:
                for plan in plans:
                    timed = run.reply(worker, plan.request(), p.Timed)
                    run.count("timing_rounds", timed.rounds_s)
                    self._accept(plan, timed)
                    done.append((plan, timed))
            finally:
                run.count("timing_wait", got - asked)
                run.count("timing_held", time.monotonic() - got)
        for plan, timed in done:
            if run.cuda:
                run.add(timer_problems(timed.series, plan.scenario.name))
                if run.options.profile:
                    self._profile(plan.scenario, plan)
        return done

    def _accept(self, plan: TimingPlan, timed: p.Timed) -> None:
        """Stop on a failed timed call or a reply without the candidate's figures."""
        run, name = self.run_, plan.scenario.name
        if timed.reason:
            who = timed.implementation or "candidate"
            line = timed.reason
            if who != "candidate":
                line = reason("infrastructure", f"{name}: {who} failed: {line}")
            run.add(line)
            raise _stop()
        if "candidate" not in timed.series:
            run.add(reason("no-result", f"{name}: no candidate timings came back"))
            raise _stop()
        self.spins[name] = round(timed.spin_us, 1)
        self.copies[name] = plan.copies

    def _profile(self, scenario: Scenario, plan: TimingPlan) -> None:
        run = self.run_
        request = p.Profile(
            scenario=scenario.name, dtype=str(plan.dtype), seed=plan.profile_seed,
            calls=PROFILE_CALLS,
        )  # fmt: skip
        with run.shared("profile"):
            prof = run.reply(self.worker, request, p.Profiled)
        if prof.reason:
            run.add(prof.reason)
            raise _stop()
        lines, self.listing[scenario.name] = profile_problems(
            prof.events, self.kernels, scenario.name
        )
        run.add(lines)
        if not prof.events:
            run.result.artifacts["profiler"] = "the profiler recorded no GPU activity"

    def _recheck_refs(self, plan: TimingPlan, timed: p.Timed) -> list[tuple[p.Recheck, Any, Any]]:
        run = self.run_
        task = run.task
        with run.building():
            bases = [
                task.make_inputs(plan.scenario, s, plan.dtype, run.build_device)
                for s in plan.base_seeds
            ]
            found = []
            for item in timed.rechecks:
                inputs = {
                    k: (v.clone() if isinstance(v, torch.Tensor) else v)
                    for k, v in bases[plan.base_of(item.counter)].items()
                }
                task.perturb(inputs, derive_seed(plan.perturb_seed, item.counter))
                found.append((item, task.reference(inputs), task.output_spec(inputs)))
            return found

    def _recheck(self, plan: TimingPlan, future: Future) -> None:
        run = self.run_
        tol = run.task.tolerance(plan.dtype)
        for item, ref, spec in future.result():
            name = plan.scenario.name
            case = Case(name, name, False, plan.dtype, f"timed call {item.round + 1}")
            record = p.CallRecord("timed", [], None, "torch.Tensor", run.device, item.out)
            _check, problem = judge(record, case, spec, ref, tol, run.device, timed=True)
            if problem:
                run.add(problem)
                break

    def _figures(self, raw: list[tuple[TimingPlan, p.Timed]]) -> list[Any]:
        run = self.run_
        cal = run.calibration() if run.calibration is not None else None
        copy_gbps = cal.copy_gbps if cal else 0.0
        if cal is not None and run.result.device is not None:
            run.result.device.copy_gbps = copy_gbps
            run.result.device.driver = cal.driver
            run.result.device.clocks = cal.clocks
            if cal.error:
                run.result.artifacts["calibration_error"] = cal.error
            if cal.problems:
                run.result.artifacts["calibration_problems"] = "; ".join(cal.problems)
        made = []
        for plan, timed in raw:
            clean = cal.baselines.get(plan.scenario.name, {}) if cal else {}
            figures = scenario_result(
                run.task, plan.scenario, plan.dtype, timed.series, run.device, copy_gbps, clean
            )
            run.result.scenarios.append(figures)
            made.append(figures)
        return made


def _stop() -> Exception:
    return Stop()
