"""One candidate's evaluation, driven from the parent: a warm worker, load, check, time.

Stages (EvalResult.stage is the last one reached):
  load         a worker from the warm pool (its trusted set-up already done) imports the
               candidate
  correctness  every job of plan.check_jobs; the parent builds the same inputs from the same
               seed on the same device (on a GPU under the device's shared lock, like any
               correctness work), computes the float64 reference in a helper thread while the
               worker runs the candidate, and judges the raw outputs (compare.py)
  timing       only if every check passed (timed.py): per public scenario, or first the
               cascade's screen scenarios (cascade.py)
  screened     the cascade stopped after its screen (the program cannot enter the top)
  done

Faults before candidate code runs (no worker could be made ready, or the one handed out died
or hung before it acknowledged the candidate) are infrastructure faults: retried on a fresh
worker, up to 3 attempts. Nothing is retried once candidate code has run. Reasons are
collected, not raised; correctness stops after `MAX_FAILED_JOBS` failing jobs or at once on a
fatal error (crash, timeout, CUDA error).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import torch

from evokernel.evaluate import protocol as p
from evokernel.evaluate.calibration import Calibration
from evokernel.evaluate.compare import Case, judge, judge_repeat
from evokernel.evaluate.locks import DeviceSlot
from evokernel.evaluate.options import EvalOptions
from evokernel.evaluate.plan import CheckJob, check_jobs, hidden_seed, warm_scenarios
from evokernel.evaluate.process import compile_cache, policy
from evokernel.evaluate.process.launch import WorkerGone, WorkerProcess
from evokernel.evaluate.process.pool import POOL, Spec, StartFailed
from evokernel.evaluate.result import DeviceInfo, EvalResult
from evokernel.evaluate.stop import Stop
from evokernel.evaluate.timed import TimingPhase
from evokernel.reasons import reason
from evokernel.tasks.base import Task

MAX_FAILED_JOBS = 4
MAX_REASONS = 12
ATTEMPTS = 3
LOAD_ACK_S = 30.0  # a worker handed out must acknowledge the candidate within this
CPU_LABEL = "cpu-interpreter (correctness only, no speed claim)"
CUDA_LABEL = "cuda-events"
R = TypeVar("R", bound=p.Message)


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
        self.helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evokernel-reference")
        self.facts: p.DeviceFacts | None = None
        # Seconds spent per stage (start-up, load, correctness, timing), kept as an artifact so
        # the cost of an evaluation can be read without a profiler.
        self.phases: dict[str, float] = {}
        self._mark = time.monotonic()
        self.given_env: dict[str, str] = {}  # the last worker's environment
        self.cache = compile_cache.shared() if self.cuda else None
        self.build_device = slot.torch_device()  # where the parent rebuilds inputs

    def phase(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._mark, 2)
        self._mark = now

    def count(self, name: str, seconds: float) -> None:
        """Add to a sub-phase counter (seconds inside the stages, not a stage of its own)."""
        self.phases[name] = round(self.phases.get(name, 0.0) + seconds, 2)

    def held(self, kind: str, seconds: float) -> None:
        """Count one hold of the shared lock by `kind` of work: `held_KIND` (the sum) and
        `longest_KIND` (the longest single hold, which an exclusive request may wait out)."""
        self.count(f"held_{kind}", seconds)
        longest = f"longest_{kind}"
        self.phases[longest] = max(self.phases.get(longest, 0.0), round(seconds, 2))

    @contextmanager
    def shared(self, kind: str) -> Iterator[None]:
        """The device's shared lock for the worker's `kind` of work ("check", "prepare",
        "profile"), with the seconds spent waiting for it and holding it counted
        (`shared_wait`, `shared_held`, and `held`)."""
        asked = time.monotonic()
        with self.slot.shared():
            got = time.monotonic()
            try:
                yield
            finally:
                now = time.monotonic()
                self.count("shared_wait", got - asked)
                self.count("shared_held", now - got)
                self.held(kind, now - got)

    # --- bookkeeping -------------------------------------------------------------------------
    def add(self, lines: list[str] | str | None) -> None:
        for line in [lines] if isinstance(lines, str) else lines or []:
            if line not in self.result.reasons:
                self.result.reasons.append(line)

    def reply(self, worker: WorkerProcess, message: p.Message, expect: type[R]) -> R:
        """The worker's answer to `message`; fatal answers and deaths end the evaluation."""
        try:
            answer = worker.request(message, (expect, p.Fatal, p.Error))
        except WorkerGone as gone:
            self.add(gone.line)
            raise Stop from None
        return self._accept(worker, answer, expect)

    def _accept(self, worker: WorkerProcess, answer: p.Message, expect: type[R]) -> R:
        if isinstance(answer, p.Fatal):
            self.add(answer.reason)
            raise Stop
        if isinstance(answer, p.Error):
            last = answer.detail.strip().splitlines()[-1:]
            self.add(reason("infrastructure", f"the worker failed: {last}"))
            self.result.artifacts["worker_error"] = answer.detail[-3000:]
            raise Stop
        assert isinstance(answer, expect)
        self.add([str(x) for x in getattr(answer, "problems", [])])
        extra = worker.extra_processes()
        if extra:
            self.add(
                reason("process", f"{len(extra)} process(es) started by the candidate still run")
            )
        return answer

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
            self.helper.shutdown(wait=True)
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

    def spec(self) -> Spec:
        opts = self.options
        return Spec(
            mode="eval",
            task=self.task.name,
            device=self.device,
            dtype=str(self.dtype),
            device_memory_mb=opts.device_memory_mb,
            threads=self.threads,
            memory_mb=opts.memory_mb,
            disk_mb=opts.disk_mb,
            cuda_visible=self.slot.visible,
            startup_timeout_s=opts.startup_timeout_s,
            warm_scenarios=warm_scenarios(self.task, self.device, opts),
        )

    def _attempt(self) -> None:
        try:
            with POOL.lease(self.spec()) as warm:
                self._evaluate_in(warm.process, warm.ready, warm.facts)
        except StartFailed as err:
            raise _Infrastructure(err.line) from None

    def _evaluate_in(
        self, worker: WorkerProcess, ready: p.Ready, facts: p.DeviceFacts | None
    ) -> None:
        harvest: Callable[[Path], object] | None = None
        try:
            self.given_env = worker.env
            self.result.artifacts["sandbox"] = ", ".join(ready.sandbox)
            isolation = policy.Isolation(tuple(ready.sandbox))
            if not isolation.isolated and not self.options.allow_unsandboxed:
                raise _Infrastructure(f"the worker's {isolation.line}")
            self.facts = facts
            self.result.device = self._device_info(facts)
            self.phase("startup")  # waiting for a ready worker (none when the pool had one)
            path = worker.dir / "candidate.py"
            path.write_text(self.source, encoding="utf-8")  # source_problems: UTF-8 only
            if self.cache is not None:
                self.cache.seed_private(worker.dir, self.source)
                cache, source = self.cache, self.source
                harvest = lambda scratch: cache.keep_for_source(scratch, source)
            try:
                self._load(worker, str(path))
                self.phase("load")
                self._correctness(worker)
                self.phase("correctness")
                if self.options.time and not self.result.reasons:
                    TimingPhase(self, worker).run()
                    self.phase("timing")
                if not self.result.reasons and self.result.stage != "screened":
                    self.result.stage = "done"
            except Stop:
                self.phase(self.result.stage)
        finally:
            # A worker's exit tears its CUDA context down, which is device work too: not
            # while another candidate is timed.
            with self.slot.shared():
                self.result.artifacts.update(worker.close(harvest=harvest))

    def _device_info(self, facts: p.DeviceFacts | None) -> DeviceInfo:
        if facts is None:
            return DeviceInfo(kind=self.device, name="", torch=torch.__version__, triton="")
        return DeviceInfo(
            kind=facts.kind,
            name=facts.name,
            torch=facts.torch,
            triton=facts.triton,
            sm_count=facts.sm_count,
            l2_bytes=facts.l2_bytes,
        )

    def _load(self, worker: WorkerProcess, path: str) -> None:
        """Import the candidate. Until the worker acknowledges (`Loading`), a death or hang is
        the infrastructure's (a pool worker that broke while waiting); after it, the
        candidate's."""
        self.result.stage = "load"
        infra = reason("infrastructure", "the worker did not acknowledge the candidate")
        worker.set_deadline(min(LOAD_ACK_S, self.options.startup_timeout_s), infra)
        try:
            worker.send(p.Load(path=path, entry=self.task.entry_point))
            worker.recv((p.Loading,))
        except WorkerGone as gone:
            line = f"a ready worker broke before the candidate ran: {gone.line}"
            raise _Infrastructure(line) from None
        timeout_s = self.options.timeout_s
        line = reason("timeout", f"no result within {timeout_s:g} s; process group killed")
        worker.set_deadline(timeout_s, line)
        try:
            answer = worker.recv((p.Loaded, p.Fatal, p.Error))
        except WorkerGone as gone:
            self.add(gone.line)
            raise Stop from None
        loaded = self._accept(worker, answer, p.Loaded)
        if loaded.reason:
            self.add(loaded.reason)
        if self.result.reasons:
            raise Stop

    # --- correctness -------------------------------------------------------------------------
    def _expected(self, job: CheckJob) -> tuple[Any, torch.Tensor, torch.Tensor | None]:
        """(output spec, reference, reference after perturb) for a job, built like the worker's."""
        with self.building():
            inputs = self.task.make_inputs(job.scenario, job.seed, job.dtype, self.build_device)
            spec = self.task.output_spec(inputs)
            ref = self.task.reference(inputs)
            ref_perturbed = None
            if job.perturb_seed is not None:
                self.task.perturb(inputs, job.perturb_seed)
                ref_perturbed = self.task.reference(inputs)
            return spec, ref, ref_perturbed

    @contextmanager
    def building(self) -> Iterator[None]:
        """Around the parent's own input building and references: on a GPU they are device
        work, so not while a candidate is timed (the shared lock)."""
        if not self.cuda:
            yield
            return
        with self.slot.shared(), torch.cuda.device(self.build_device):
            got = time.monotonic()
            try:
                yield
            finally:
                self.held("refs", time.monotonic() - got)

    def _correctness(self, worker: WorkerProcess) -> None:
        self.result.stage = "correctness"
        failed_jobs = 0
        hseed = hidden_seed(self.seed)
        for job in check_jobs(self.task, self.device, self.options, self.seed):
            expected = self.helper.submit(self._expected, job)
            with self.shared("check"):
                checked = self.reply(worker, job.request(hseed), p.Checked)
            lines = self._judge_job(job, checked.records, expected)
            self.add(lines)
            if lines:
                failed_jobs += 1
                if failed_jobs >= MAX_FAILED_JOBS:
                    break

    def _judge_job(self, job: CheckJob, records: list[p.CallRecord], expected: Future) -> list[str]:
        asked = time.monotonic()
        spec, ref, ref_perturbed = expected.result()
        self.count("reference_wait", time.monotonic() - asked)
        tol = self.task.tolerance(job.dtype)
        lines: list[str] = []
        first: torch.Tensor | None = None
        for record in records:
            step = record.step
            note = job.note if step != "perturbed" else f"{job.note}, after perturb".lstrip(", ")
            case = Case(job.scenario.name, job.label, job.scenario.hidden, job.dtype, note)
            if record.mutated:
                changed = ", ".join(map(str, record.mutated))
                lines.append(reason("input-mutated", f"{case.where()}: changed {changed}"))
            repeat = step == "same" and first is not None
            if repeat and record.out is not None and first is not None:
                # The repeat is compared with the first call before the reference, so a result
                # that changes from call to call is reported as such.
                line = judge_repeat(first, record.out, case, tol)
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
                first = record.out
        return lines
