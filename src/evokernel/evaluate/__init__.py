"""The trustworthy kernel evaluator (see docs/evaluator-design.md).

    from evokernel.evaluate import evaluate, evaluate_many, run_isolated, EvalOptions

    isolation_status().line        # "sandbox: landlock v7, netns, pidns, ..., seccomp"
    result = evaluate("gqa_decode_attention", "cand.py", device="cuda")   # -> EvalResult
    results = evaluate_many(task, [src1, src2], device="cpu", workers=2)
    default_workers("cuda")        # evaluations in flight that suit this machine
    outcome = run_isolated("evaluator.py", "evaluate", ["prog.py"], timeout_s=60)

The layout is the trust boundary:
  (this folder)  the parent, trusted: verdicts, references, statistics
    api          evaluate / evaluate_many, calibration, device slots
    static       AST pre-check (a fast first filter; nothing relies on it)
    session      drives one candidate through load -> correctness -> timing (timed.py)
    plan         correctness jobs and timing schedules from the hidden seed
    cascade      the screen before full timing
    compare      the comparator against the float64 reference
    stats, figures  statistics and per-scenario figures, timer cross-checks
    calibration  baseline times and copy bandwidth in a worker that never sees a candidate
    isolated     run_isolated for any function in any file
    options, result  what an evaluation may do; the typed results and reason codes
  protocol       the boundary itself: typed requests and replies, one codec
  process/       process control: the OS sandbox (policy, confine, landlock, seccomp, cgroup),
                 worker processes (launch), the warm pool, /proc (procs), the channel, the
                 shared compile cache
  worker/        what runs next to candidate code, inside the sandbox: the request loop,
                 calls and correctness jobs, timed calls, the profiler pass, tamper guards

Exports are resolved lazily so that a worker started for `run_isolated` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evokernel.evaluate.api import default_workers as default_workers
    from evokernel.evaluate.api import evaluate as evaluate
    from evokernel.evaluate.api import evaluate_many as evaluate_many
    from evokernel.evaluate.cascade import Cascade as Cascade
    from evokernel.evaluate.isolated import SandboxOutcome as SandboxOutcome
    from evokernel.evaluate.isolated import run_isolated as run_isolated
    from evokernel.evaluate.options import EvalOptions as EvalOptions
    from evokernel.evaluate.process.policy import Isolation as Isolation
    from evokernel.evaluate.process.policy import isolation_status as isolation_status
    from evokernel.evaluate.result import CheckRecord as CheckRecord
    from evokernel.evaluate.result import DeviceInfo as DeviceInfo
    from evokernel.evaluate.result import EvalResult as EvalResult
    from evokernel.evaluate.result import ScenarioResult as ScenarioResult
    from evokernel.evaluate.result import TimingStats as TimingStats
    from evokernel.reasons import REASON_CODES as REASON_CODES
    from evokernel.reasons import reason as reason
    from evokernel.reasons import reason_code as reason_code

_EXPORTS = {
    "default_workers": "api",
    "evaluate": "api",
    "Cascade": "cascade",
    "evaluate_many": "api",
    "run_isolated": "isolated",
    "SandboxOutcome": "isolated",
    "EvalOptions": "options",
    "Isolation": "process.policy",
    "isolation_status": "process.policy",
    "REASON_CODES": "result",
    "CheckRecord": "result",
    "DeviceInfo": "result",
    "EvalResult": "result",
    "ScenarioResult": "result",
    "TimingStats": "result",
    "reason": "result",
    "reason_code": "result",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
