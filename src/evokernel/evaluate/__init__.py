"""The trustworthy kernel evaluator (see docs/evaluator-design.md).

    from evokernel.evaluate import evaluate, evaluate_many, run_isolated, EvalOptions

    isolation_status().line        # "sandbox: landlock v7, netns, pidns, ..., seccomp"
    result = evaluate("gqa_decode_attention", "cand.py", device="cuda")   # -> EvalResult
    results = evaluate_many(task, [src1, src2], device="cpu", workers=2)
    outcome = run_isolated("evaluator.py", "evaluate", ["prog.py"], timeout_s=60)

Modules, in the order a candidate meets them:
  static       parent: AST pre-check (allowlisted imports, forbidden constructs)
  api          parent: evaluate / evaluate_many, calibration, device slots
  session      parent: drives one worker through load -> correctness -> timing
  plan         parent: correctness jobs and timing schedules from the hidden seed
  sandbox      parent: the worker process, its limits, its private channel; procs: /proc
  channel      both: framed JSON + raw tensor bytes (nothing is unpickled)
  worker       child: trusted setup, then the candidate; wcalls (calls, correctness jobs),
               wtiming (timed calls), wprofile (profiler pass), guards (tamper checks),
               warmup (trusted warm-up)
  compare      parent: the comparator against the float64 reference
  stats, figures  parent: statistics and per-scenario figures
  calibration  parent + a clean worker: copy bandwidth, baseline times without a candidate
  isolated     run_isolated for any function in any file
  result       the typed results and reason codes

Exports are resolved lazily so that a worker started for `run_isolated` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evokernel.evaluate.api import evaluate as evaluate
    from evokernel.evaluate.api import evaluate_many as evaluate_many
    from evokernel.evaluate.isolated import SandboxOutcome as SandboxOutcome
    from evokernel.evaluate.isolated import run_isolated as run_isolated
    from evokernel.evaluate.options import EvalOptions as EvalOptions
    from evokernel.evaluate.process.policy import Isolation as Isolation
    from evokernel.evaluate.process.policy import isolation_status as isolation_status
    from evokernel.evaluate.result import REASON_CODES as REASON_CODES
    from evokernel.evaluate.result import CheckRecord as CheckRecord
    from evokernel.evaluate.result import DeviceInfo as DeviceInfo
    from evokernel.evaluate.result import EvalResult as EvalResult
    from evokernel.evaluate.result import ScenarioResult as ScenarioResult
    from evokernel.evaluate.result import TimingStats as TimingStats
    from evokernel.evaluate.result import reason as reason
    from evokernel.evaluate.result import reason_code as reason_code

_EXPORTS = {
    "evaluate": "api",
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
