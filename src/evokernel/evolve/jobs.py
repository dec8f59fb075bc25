"""One evaluation as a self-contained job: what an evaluation worker receives and runs.

    job = problem.job(code, promote_above)       # on the driver
    result = run_job(job, gpu=0)                 # on the worker: an EvalResult

An `EvalJob` holds everything the evaluation needs and nothing of the run: the problem's
identity (a kernel task name, or a generic evaluator's path and sha256), the device, the
program's source and the evaluator settings. It travels as JSON (`to_json`/`from_json`), so a
remote worker receives candidate source in and sends `EvalResult` JSON out; no run state,
database or random generator crosses the network.

`run_job` runs the candidate the way `evokernel eval` does: through `evokernel.evaluate`
(static check, a fresh killable, sandboxed worker process, correctness, timing) for a kernel
task, through `generic_eval` (the user's evaluator and its stages, each call in
`run_isolated`) for a generic one. Both backends call it, so local and
remote evaluations of one program are the same evaluation. It raises `JobError` only when
this worker cannot run jobs at all (another evokernel version than the driver's, a generic
evaluator missing or different on this node): retrying elsewhere will not help.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from evokernel import __version__
from evokernel.errors import EvokernelError

if TYPE_CHECKING:
    from evokernel.evaluate.result import EvalResult

KINDS = ("kernel", "generic")


class JobError(EvokernelError):
    """This worker cannot run evaluation jobs (a setup problem, not the candidate's)."""


@dataclass(frozen=True)
class EvalJob:
    kind: str  # "kernel" | "generic"
    name: str  # the kernel task, or the generic problem's name ("generic:<stem>")
    device: str  # "cuda" | "cpu"
    code: str  # the program's whole source
    timeout_s: float
    memory_mb: int
    time: bool = True  # kernel: time the scenarios (False: correctness only)
    reps: int | None = None  # kernel: timed rounds per scenario; None: the evaluator's default
    profile: bool = True  # kernel: profiler pass per scenario on cuda
    screen_scenarios: tuple[str, ...] = ()  # kernel: the cascade's screen (): evaluator's pick
    promote_above: float | None = None  # kernel: cascade threshold; None: evaluate in full
    evaluator: str = ""  # generic: absolute path of the file defining evaluate(path)
    evaluator_sha256: str = ""
    functions: tuple[str, ...] = ()  # generic: evaluate, evaluate_stage1..3 the file defines
    cascade: bool = True  # generic: run the stage functions as a cascade
    thresholds: tuple[float, ...] = ()  # generic: the cascade's thresholds
    features: tuple[str, ...] = ()  # generic: metrics that are MAP-Elites features
    version: str = field(default=__version__)  # the driver's evokernel version

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise JobError(f"unknown job kind {self.kind!r}")
        for name in ("screen_scenarios", "functions", "thresholds", "features"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EvalJob:
        data = json.loads(text)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def run_job(job: EvalJob, gpu: int = 0) -> EvalResult:
    """Evaluate `job` on this machine; `gpu` picks among the visible GPUs."""
    if job.version != __version__:
        raise JobError(f"this worker runs evokernel {__version__}, the driver {job.version}")
    if job.kind == "generic":
        return _generic(job)
    from evokernel import device as devices
    from evokernel.evaluate import EvalOptions, evaluate
    from evokernel.evolve.cascade import with_cascade

    devices.prepare(job.device)  # a fresh remote worker: Triton's mode before any kernel
    options: Any = EvalOptions(
        timeout_s=job.timeout_s,
        time=job.time,
        reps=job.reps,
        profile=job.profile,
        memory_mb=job.memory_mb,
    )
    options = with_cascade(options, job.screen_scenarios, job.promote_above)
    return evaluate(job.name, job.code, device=job.device, options=options, gpu=gpu)


def _generic(job: EvalJob) -> EvalResult:
    import hashlib
    from pathlib import Path

    from evokernel.evolve.generic_eval import GenericEval, evaluate_generic

    evaluator = Path(job.evaluator)
    if not evaluator.is_file():
        raise JobError(f"the evaluator {evaluator} does not exist on this worker")
    if hashlib.sha256(evaluator.read_bytes()).hexdigest() != job.evaluator_sha256:
        raise JobError(f"the evaluator {evaluator} on this worker differs from the run's")
    spec = GenericEval(
        name=job.name,
        evaluator=job.evaluator,
        functions=job.functions or ("evaluate",),
        timeout_s=job.timeout_s,
        memory_mb=job.memory_mb,
        cascade=job.cascade,
        thresholds=job.thresholds,
        features=job.features,
    )
    return evaluate_generic(spec, job.code)
