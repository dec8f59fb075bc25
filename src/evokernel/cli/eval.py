"""`evokernel eval TASK CANDIDATE.py [--device cuda|cpu] [--json] [--seed N] [--no-time]
[--timeout S] [--scenarios A,B] [--no-static] [--allow-unsandboxed]`: evaluate one candidate.

First says on stderr which OS isolation the candidate runs under (`sandbox: landlock v7, netns,
...`); without Landlock and seccomp it refuses (exit 2) unless `--allow-unsandboxed`. Prints
one table row per public scenario (candidate and fastest-baseline medians, speedup with its
95% interval, % of the roofline, flags) and the reasons when the candidate fails. `--json`
ends stdout with one JSON line: `EvalResult.to_dict()` (at least `task`, `correct`, `reasons`
and per-scenario figures). Exit 0 when correct, 1 when not, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from evokernel.cli import args as checked

ORDER = 60


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate one candidate kernel for a task")
    p.add_argument("task", help="task name (see `evokernel tasks`)")
    p.add_argument("candidate", help="candidate .py file")
    p.add_argument(
        "--device", choices=("cuda", "cpu"), default=None, help="default: CUDA if present"
    )
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line")
    p.add_argument(
        "--seed",
        default=None,
        metavar="N",
        help="input seed in [0, 2**63) (default: random, hidden)",
    )
    p.add_argument("--no-time", action="store_true", help="correctness only")
    p.add_argument(
        "--timeout", default=None, metavar="S", help="wall-clock limit in seconds, finite and > 0"
    )
    p.add_argument("--scenarios", default=None, help="comma-separated public scenario names")
    p.add_argument(
        "--no-static",
        action="store_true",
        help="skip the static pre-check (size and encoding are still checked)",
    )
    add_allow_unsandboxed(p)
    p.set_defaults(func=run)


def add_allow_unsandboxed(p: argparse.ArgumentParser) -> None:
    """The flag of every verb that evaluates candidates."""
    p.add_argument(
        "--allow-unsandboxed",
        action="store_true",
        help="evaluate even where the OS sandbox (Landlock + seccomp) is unavailable",
    )


def _us(x: float) -> str:
    return f"{x:,.1f} us" if x < 10_000 else f"{x / 1000:,.2f} ms"


def render(result: object) -> str:
    from evokernel.evaluate.result import EvalResult

    assert isinstance(result, EvalResult)
    dev = result.device
    lines = [
        f"task {result.task}  candidate {result.candidate}",
        f"device {dev.kind + ' ' + dev.name if dev else '-'}  timing: {result.timing_label}",
    ]
    if dev and dev.copy_gbps:
        lines.append(f"copy bandwidth {dev.copy_gbps:,.0f} GB/s  {dev.clocks}".rstrip())
    if result.scenarios:
        head = (
            f"{'scenario':<16} {'candidate':>11} {'baseline':>11} {'speedup [95% CI]':>24} "
            f"{'roofline':>9}  flags"
        )
        lines += ["", head, "-" * len(head)]
        for s in result.scenarios:
            speed = "-"
            if s.speedup is not None and s.speedup_ci is not None:
                speed = f"{s.speedup:.2f}x [{s.speedup_ci[0]:.2f}, {s.speedup_ci[1]:.2f}]"
            roof = f"{s.pct_roofline:.0f}%" if s.roofline_us else "-"
            base = s.baselines[s.baseline].median_us
            lines.append(
                f"{s.name:<16} {_us(s.candidate.median_us):>11} {_us(base):>11} {speed:>24} "
                f"{roof:>9}  {','.join(s.flags)}"
            )
        lines.append("(baseline: the fastest stock implementation per scenario)")
    passed = sum(c.passed for c in result.checks)
    lines.append("")
    lines.append(
        f"checks passed: {passed}/{len(result.checks)}  stage: {result.stage}  "
        f"wall {result.wall_s:.1f} s"
    )
    if result.correct:
        lines.append("CORRECT")
    else:
        lines.append("REJECTED")
        lines += [f"  {r}" for r in result.reasons]
    return "\n".join(lines)


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def run(args: argparse.Namespace) -> int:
    from evokernel import device as devices
    from evokernel.evaluate import EvalOptions, evaluate, isolation_status
    from evokernel.evaluate.api import check_arguments, read_candidate

    candidate: Path = checked.regular_file(args.candidate, "CANDIDATE")
    seed = None if args.seed is None else checked.seed(args.seed)
    fields: dict[str, object] = {"seed": seed, "time": not args.no_time}
    if args.timeout is not None:
        fields["timeout_s"] = checked.real(args.timeout, "--timeout", lo=0.0, lo_open=True)
    if args.scenarios is not None:
        fields["scenarios"] = checked.name_list(args.scenarios, "--scenarios")
    if args.no_static:
        fields["static_check"] = False
    if args.allow_unsandboxed:
        fields["allow_unsandboxed"] = True
    options = EvalOptions(**fields)  # type: ignore[arg-type]
    check_arguments(args.task, args.device, options)  # bad input: one line, before anything
    read_candidate(candidate)
    if devices.resolve(args.device) == "cpu":
        devices.check_interpreter()  # candidates are Triton kernels, interpreted on the CPU
    # SIGTERM unwinds like Ctrl-C, so the worker and its scratch directory are cleaned up.
    signal.signal(signal.SIGTERM, _terminated)
    print(isolation_status().line, file=sys.stderr, flush=True)
    result = evaluate(args.task, candidate, device=args.device, options=options)
    print(render(result))
    if args.json:
        print(result.to_json())
    return 0 if result.correct else 1
