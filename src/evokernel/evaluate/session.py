"""One candidate's evaluation, driven from the parent: start a worker, load, check, time.

Stages (EvalResult.stage is the last one reached):
  load         a fresh worker does its trusted setup, then imports the candidate
  correctness  every job of plan.check_jobs; the parent builds the same inputs from the same
               seed, computes the float64 reference in a helper thread while the worker runs
               the candidate, and judges the raw outputs (compare.py)
  timing       only if every check passed: per public scenario the timing inputs are built
               (shared device lock), then the timed phase (exclusive device lock), the
               re-check of sampled timed outputs, and on CUDA a profiler pass
  done

Failures before the candidate is imported (the worker did not start, or broke during its own
setup) are infrastructure faults: retried on a fresh worker, up to 3 attempts. Nothing is
retried once candidate code has run. Reasons are collected, not raised; correctness stops
after `MAX_FAILED_JOBS` failing jobs or at once on a fatal error (crash, timeout, CUDA error).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from evokernel.evaluate.calibration import Calibration
from evokernel.evaluate.compare import Case, judge, judge_repeat
from evokernel.evaluate.figures import profile_problems, scenario_result, timer_problems
from evokernel.evaluate.locks import DeviceSlot
from evokernel.evaluate.options import EvalOptions
from evokernel.evaluate.plan import (
    CheckJob,
    TimingPlan,
    check_jobs,
    hidden_seed,
    public_scenarios,
    timing_plan,
)
from evokernel.evaluate.process import policy
from evokernel.evaluate.result import DeviceInfo, EvalResult, reason
from evokernel.evaluate.sandbox import Worker, WorkerGone
from evokernel.evaluate.static import triton_kernels
from evokernel.tasks.base import Task
from evokernel.tasks.rng import derive_seed

MAX_FAILED_JOBS = 4
MAX_REASONS = 12
ATTEMPTS = 3
PROFILE_CALLS = 3
CPU_LABEL = "cpu-interpreter (correctness only, no speed claim)"
CUDA_LABEL = "cuda-events"


class _Stop(Exception):
    """End the evaluation now (the reason is already recorded)."""


class _Infrastructure(Exception):
    """A fault before candidate code ran: retry on a fresh worker."""


class CandidateRun:
    def __init__(
        self,
        task: Task,
        source: str,
        label: str,
        device: str,
        options: EvalOptions,
        seed: int,
        slot: DeviceSlot,
        calibration: Callable[[], Calibration] | None,
        threads: int,
    ) -> None:
        self.task, self.source, self.label, self.device = task, source, label, device
        self.options, self.seed, self.slot, self.threads = options, seed, slot, threads
        self.calibration = calibration
        self.cuda = device == "cuda"
        self.dtype = task.dtypes[device][0]
        self.result = EvalResult(
            task=task.name,
            candidate=label,
            correct=False,
            reasons=[],
            stage="load",
            device=None,
            timing_label=CUDA_LABEL if self.cuda else CPU_LABEL,
        )
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evokernel-reference")
        self.ready: dict[str, Any] = {}
        # Seconds spent per stage (start-up, load, correctness, timing), kept as an artifact so
        # the cost of an evaluation can be read without a profiler.
        self.phases: dict[str, float] = {}
        self._mark = time.monotonic()
        self.given_env: dict[str, str] = {}  # the last worker's environment

    def _phase(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._mark, 2)
        self._mark = now

    # --- bookkeeping -------------------------------------------------------------------------
    def add(self, lines: list[str] | str | None) -> None:
        for line in [lines] if isinstance(lines, str) else lines or []:
            if line not in self.result.reasons:
                self.result.reasons.append(line)

    def _reply(self, worker: Worker, message: dict[str, Any], expect: str) -> dict[str, Any]:
        """The worker's answer to `message`; fatal answers and deaths end the evaluation."""
        try:
            reply = worker.request(message)
        except WorkerGone as gone:
            self.add(gone.line)
            raise _Stop from None
        op = reply.get("op")
        if op == "fatal":
            self.add(str(reply.get("reason")))
            raise _Stop
        if op == "error":
            detail = str(reply.get("detail", ""))
            self.add(
                reason("infrastructure", f"the worker failed: {detail.strip().splitlines()[-1:]}")
            )
            self.result.artifacts["worker_error"] = detail
            raise _Stop
        if op != expect:
            self.add(reason("no-result", f"expected a {expect!r} message, got {str(op)[:40]!r}"))
            raise _Stop
        self.add([str(p) for p in reply.get("problems", [])])
        extra = worker.extra_processes()
        if extra:
            self.add(
                reason("process", f"{len(extra)} process(es) started by the candidate still run")
            )
        return reply

    # --- the run -----------------------------------------------------------------------------
    def run(self) -> EvalResult:
        start = time.monotonic()
        try:
            for attempt in range(ATTEMPTS):
                try:
                    self._attempt()
                    break
                except _Infrastructure as err:
                    if attempt == ATTEMPTS - 1:
                        self.add(reason("infrastructure", f"{err} (after {ATTEMPTS} attempts)"))
        finally:
            self.pool.shutdown(wait=True)
        if len(self.result.reasons) > MAX_REASONS:
            extra = len(self.result.reasons) - MAX_REASONS
            self.result.reasons = self.result.reasons[:MAX_REASONS]
            self.result.artifacts["reasons_dropped"] = str(extra)
        self.result.correct = not self.result.reasons
        self.result.wall_s = time.monotonic() - start
        self.result.artifacts["phases"] = json.dumps(self.phases)
        self._redact()
        return self.result

    def _redact(self) -> None:
        """Cut values of the evaluator's environment out of every text the candidate could
        have shaped (reasons quote its exceptions; artifacts its output)."""
        given = self.given_env
        res = self.result
        res.reasons = [policy.redact(r, given) for r in res.reasons]
        res.artifacts = {k: policy.redact(v, given) for k, v in res.artifacts.items()}
        for check in res.checks:
            check.detail = policy.redact(check.detail, given)

    def _attempt(self) -> None:
        opts = self.options
        worker = Worker(
            device=self.device,
            memory_mb=opts.memory_mb,
            disk_mb=opts.disk_mb,
            cuda_visible=self.slot.visible,
            threads=self.threads,
        )
        self.given_env = worker.env
        try:
            worker.set_deadline(
                opts.startup_timeout_s, reason("infrastructure", "worker start-up timed out")
            )
            try:
                ready = worker.request(
                    {
                        "op": "init",
                        "mode": "eval",
                        "task": self.task.name,
                        "device": self.device,
                        "dtype": str(self.dtype),
                        "device_memory_mb": opts.device_memory_mb,
                        "threads": self.threads,
                    }
                )
            except WorkerGone as gone:
                raise _Infrastructure(f"worker start-up failed: {gone.line}") from None
            layers = [str(x) for x in ready.get("sandbox", [])]
            if ready.get("op") != "ready":
                detail = str(ready.get("detail", ready))
                policy.note_setup_failure(layers, self.device, detail)  # next attempt adapts
                raise _Infrastructure(f"worker setup failed: {detail[-300:]}")
            self.result.artifacts["sandbox"] = ", ".join(layers)
            isolation = policy.Isolation(tuple(layers))
            if not isolation.isolated and not opts.allow_unsandboxed:
                raise _Infrastructure(f"the worker's {isolation.line}")
            self.ready = ready
            self._phase("startup")
            self.result.device = self._device_info(ready.get("device", {}))
            path = worker.dir / "candidate.py"
            path.write_text(self.source)
            worker.set_deadline(
                opts.timeout_s,
                reason("timeout", f"no result within {opts.timeout_s:g} s; process group killed"),
            )
            try:
                self._load(worker, str(path))
                self._phase("load")
                self._correctness(worker)
                self._phase("correctness")
                if opts.time and not self.result.reasons:
                    self._timing(worker)
                    self._phase("timing")
                if not self.result.reasons:
                    self.result.stage = "done"
            except _Stop:
                self._phase(self.result.stage)
        finally:
            self.result.artifacts.update(worker.close())

    def _device_info(self, info: dict[str, Any]) -> DeviceInfo:
        return DeviceInfo(
            kind=str(info.get("kind", self.device)),
            name=str(info.get("name", "")),
            torch=str(info.get("torch", torch.__version__)),
            triton=str(info.get("triton", "")),
            sm_count=int(info.get("sm_count", 0) or 0),
            l2_bytes=int(info.get("l2_bytes", 0) or 0),
        )

    def _load(self, worker: Worker, path: str) -> None:
        self.result.stage = "load"
        reply = self._reply(
            worker, {"op": "load", "path": path, "entry": self.task.entry_point}, "loaded"
        )
        if reply.get("reason"):
            self.add(str(reply["reason"]))
        if self.result.reasons:
            raise _Stop

    # --- correctness -------------------------------------------------------------------------
    def _expected(self, job: CheckJob) -> tuple[Any, torch.Tensor, torch.Tensor | None]:
        """(output spec, reference, reference after perturb) for a job, built like the worker's."""
        inputs = self.task.make_inputs(job.scenario, job.seed, job.dtype)
        spec = self.task.output_spec(inputs)
        ref = self.task.reference(inputs)
        ref_perturbed = None
        if job.perturb_seed is not None:
            self.task.perturb(inputs, job.perturb_seed)
            ref_perturbed = self.task.reference(inputs)
        return spec, ref, ref_perturbed

    def _correctness(self, worker: Worker) -> None:
        self.result.stage = "correctness"
        jobs = check_jobs(self.task, self.device, self.options, self.seed)
        failed_jobs = 0
        hseed = hidden_seed(self.seed)
        for job in jobs:
            expected = self.pool.submit(self._expected, job)
            message = {
                "op": "check",
                "scenario": job.scenario.name,
                "hidden_seed": hseed if job.scenario.hidden else None,
                "seed": job.seed,
                "dtype": str(job.dtype),
                "perturb_seed": job.perturb_seed,
                "repeat": job.repeat,
            }
            with self.slot.shared():
                reply = self._reply(worker, message, "checked")
            lines = self._judge_job(job, reply["records"], expected)
            self.add(lines)
            if lines:
                failed_jobs += 1
                if failed_jobs >= MAX_FAILED_JOBS:
                    break

    def _judge_job(
        self, job: CheckJob, records: list[dict[str, Any]], expected: Future
    ) -> list[str]:
        spec, ref, ref_perturbed = expected.result()
        tol = self.task.tolerance(job.dtype)
        lines: list[str] = []
        first: torch.Tensor | None = None
        for record in records:
            step = record.get("step")
            note = job.note if step != "perturbed" else f"{job.note}, after perturb".lstrip(", ")
            case = Case(job.scenario.name, job.label, job.scenario.hidden, job.dtype, note)
            mutated = record.get("mutated") or []
            if mutated:
                lines.append(
                    reason(
                        "input-mutated", f"{case.where()}: changed {', '.join(map(str, mutated))}"
                    )
                )
            repeat = step == "same" and first is not None
            out = record.get("out")
            if repeat and isinstance(out, torch.Tensor) and first is not None:
                # The repeat is compared with the first call before the reference, so a result
                # that changes from call to call is reported as such.
                line = judge_repeat(first, out, case, tol)
                if line is not None:
                    lines.append(line)
                    break
            target = ref_perturbed if step == "perturbed" else ref
            assert target is not None
            check, line = judge(record, case, spec, target, tol, self.device)
            if not repeat or line is not None:
                self.result.checks.append(check)
            if line is not None:
                lines.append(line)
                break
            if first is None:
                first = record["out"]
        return lines

    # --- timing ------------------------------------------------------------------------------
    def _recheck_refs(
        self, plan: TimingPlan, rechecks: list[dict[str, Any]]
    ) -> list[tuple[dict[str, Any], torch.Tensor, Any]]:
        bases = [self.task.make_inputs(plan.scenario, s, plan.dtype) for s in plan.base_seeds]
        found = []
        for item in rechecks:
            counter = int(item["counter"])
            inputs = {
                k: (v.clone() if isinstance(v, torch.Tensor) else v)
                for k, v in bases[plan.base_of(counter)].items()
            }
            self.task.perturb(inputs, derive_seed(plan.perturb_seed, counter))
            found.append((item, self.task.reference(inputs), self.task.output_spec(inputs)))
        return found

    def _timing(self, worker: Worker) -> None:
        self.result.stage = "timing"
        l2 = int(self.ready.get("device", {}).get("l2_bytes", 0) or 0)
        kernels = triton_kernels(self.source)
        raw: list[tuple[TimingPlan, dict[str, Any]]] = []
        pending: list[tuple[TimingPlan, Future]] = []
        listing: dict[str, Any] = {}
        for scenario in public_scenarios(self.task, self.device, self.options):
            plan = timing_plan(self.task, scenario, self.device, self.options, self.seed, l2, True)
            with self.slot.shared():
                self._reply(worker, {**plan.message(), "op": "prepare"}, "prepared")
            asked = time.monotonic()
            with self.slot.exclusive():
                got = time.monotonic()
                reply = self._reply(worker, plan.message(), "timed")
            self.phases["timing_wait"] = round(self.phases.get("timing_wait", 0) + got - asked, 2)
            held = time.monotonic() - got
            self.phases["timing_held"] = round(self.phases.get("timing_held", 0) + held, 2)
            if reply.get("reason"):
                who = str(reply.get("implementation", "candidate"))
                line = str(reply["reason"])
                if who != "candidate":
                    line = reason("infrastructure", f"{scenario.name}: {who} failed: {line}")
                self.add(line)
                raise _Stop
            pending.append((plan, self.pool.submit(self._recheck_refs, plan, reply["rechecks"])))
            raw.append((plan, reply))
            if self.cuda:
                self.add(timer_problems(reply["series"], scenario.name))
            if self.cuda and self.options.profile:
                message = {
                    "op": "profile",
                    "scenario": scenario.name,
                    "dtype": str(plan.dtype),
                    "seed": plan.profile_seed,
                    "calls": PROFILE_CALLS,
                }
                with self.slot.exclusive():
                    prof = self._reply(worker, message, "profiled")
                if prof.get("reason"):
                    self.add(str(prof["reason"]))
                    raise _Stop
                lines, listing[scenario.name] = profile_problems(
                    prof.get("events", []), kernels, scenario.name
                )
                self.add(lines)
                if not prof.get("events"):
                    self.result.artifacts["profiler"] = "the profiler recorded no GPU activity"
        if listing:
            self.result.artifacts["kernels"] = json.dumps(listing)
        for plan, future in pending:
            tol = self.task.tolerance(plan.dtype)
            for item, ref, spec in future.result():
                case = Case(
                    plan.scenario.name,
                    plan.scenario.name,
                    False,
                    plan.dtype,
                    f"timed call {item['round'] + 1}",
                )
                record = {"type": "torch.Tensor", "device": self.device, "out": item["out"]}
                _check, problem = judge(record, case, spec, ref, tol, self.device, timed=True)
                if problem:
                    self.add(problem)
                    break
        self._figures(raw)

    def _figures(self, raw: list[tuple[TimingPlan, dict[str, Any]]]) -> None:
        cal = self.calibration() if self.calibration is not None else None
        copy_gbps = cal.copy_gbps if cal else 0.0
        if cal is not None and self.result.device is not None:
            self.result.device.copy_gbps = copy_gbps
            self.result.device.driver = cal.driver
            self.result.device.clocks = cal.clocks
            if cal.error:
                self.result.artifacts["calibration_error"] = cal.error
            if cal.problems:
                self.result.artifacts["calibration_problems"] = "; ".join(cal.problems)
        for plan, reply in raw:
            clean = cal.baselines.get(plan.scenario.name, {}) if cal else {}
            self.result.scenarios.append(
                scenario_result(
                    self.task,
                    plan.scenario,
                    plan.dtype,
                    reply["series"],
                    self.device,
                    copy_gbps,
                    clean,
                )
            )
        if raw:
            spins = {
                plan.scenario.name: round(float(reply.get("spin_us", 0.0)), 1)
                for plan, reply in raw
            }
            copies = {plan.scenario.name: plan.copies for plan, _ in raw}
            self.result.artifacts["timing"] = json.dumps({"spin_us": spins, "input_copies": copies})
