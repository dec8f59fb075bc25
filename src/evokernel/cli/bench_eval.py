"""`evokernel bench eval`: the evaluator's throughput on a fixed set of honest programs.

    evokernel bench eval [--tasks A,B] [--programs N | --sweep] [--workers N]
        [--promote-above X] [--max-minutes M] [--device cuda|cpu] [--out FILE.json] [--json]
        [--allow-unsandboxed]

Runs the task seeds with their declared knob values through the evaluator with its default
settings, as the search does (bench/eval_bench.py), and prints evaluations per minute, the mean
phase breakdown, the GPU-held time per evaluation and the false-rejection count (every program
is honest), then one JSON line (the summary; with --json, the whole document). Progress goes to
stderr, one line per evaluation. Exit 0 when the result file is written, rejections included;
130 on SIGINT, 143 on SIGTERM: the evaluations in flight are stopped, their scratch
directories removed, and the figures of the finished ones stay in the result file (marked
`"complete": false`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from evokernel.cli import args as checked
from evokernel.cli import interrupts
from evokernel.cli.eval import add_allow_unsandboxed
from evokernel.errors import EvokernelError


def add_to(verbs: argparse._SubParsersAction) -> None:
    """Add `eval` to the `bench` verbs (not a verb module of its own: no `register`)."""
    e = verbs.add_parser(
        "eval",
        help="evaluator throughput: evaluations/min, phases, GPU-held time, false rejections",
        description=(
            "Evaluate a fixed set of honest programs (the task seeds with declared knob values) "
            "with the evaluator's default settings and the default number of evaluations in "
            "flight, as `evokernel evolve` does; print evaluations per minute, the mean phase "
            "breakdown (worker start-up, load, correctness, timing, of which waiting for and "
            "holding the GPU), the GPU-held time per evaluation and the false rejections. "
            "Writes JSON (default out/bench-eval-TIME.json)."
        ),
    )
    e.add_argument(
        "--tasks",
        default="decode_linear,gqa_decode_attention",
        metavar="A,B",
        help="kernel tasks (default: decode_linear,gqa_decode_attention)",
    )
    e.add_argument(
        "--programs",
        default="8",
        metavar="N",
        help="programs per task, evenly spaced over its declared knob space (default 8)",
    )
    e.add_argument("--sweep", action="store_true", help="every program of each knob space")
    e.add_argument(
        "--workers", default="0", metavar="N", help="evaluations in flight (0: the default)"
    )
    e.add_argument(
        "--promote-above",
        default=None,
        metavar="X",
        help="screen with the evaluator's cascade at this speedup (default: full evaluations)",
    )
    e.add_argument(
        "--max-minutes",
        default="0",
        metavar="M",
        help="start no evaluation after M minutes (0: no limit); the rest is counted as such",
    )
    e.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: CUDA if any")
    e.add_argument("--out", metavar="FILE.json", help="result file")
    e.add_argument("--json", action="store_true", help="the last line is the whole document")
    add_allow_unsandboxed(e)
    e.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evokernel import device as devices
    from evokernel.bench.eval_bench import EvalBenchOptions, format_table, run_eval_bench, write
    from evokernel.evaluate import Cascade, EvalOptions
    from evokernel.evaluate.process.policy import require_isolation
    from evokernel.tasks import get_task

    tasks = checked.name_list(args.tasks, "--tasks")
    for task in tasks:
        get_task(task)  # an unknown task is one line
    programs = 0 if args.sweep else checked.integer(args.programs, "--programs", lo=1)
    workers = checked.integer(args.workers, "--workers", lo=0, hi=4096)
    minutes = checked.real(args.max_minutes, "--max-minutes", lo=0.0)
    cascade = None
    if args.promote_above is not None:
        cascade = Cascade(promote_above=checked.real(args.promote_above, "--promote-above"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("out") / f"bench-eval-{stamp}.json"
    if out.suffix != ".json":
        raise EvokernelError(f"--out must name a .json file, got {out}")
    checked.output_dir(out.parent, "--out")
    device = devices.resolve(args.device)
    if device == "cpu":
        devices.check_interpreter()
    devices.prepare(device)
    print(require_isolation(args.allow_unsandboxed).line, file=sys.stderr, flush=True)
    command = " ".join(["evokernel", *sys.argv[1:]])
    opts = EvalBenchOptions(
        device=device,
        tasks=tasks,
        programs=programs,
        workers=workers,
        max_minutes=minutes,
        options=EvalOptions(cascade=cascade, allow_unsandboxed=args.allow_unsandboxed),
        command=command,
    )
    interrupts.catch_signals()
    try:
        doc = run_eval_bench(
            opts,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
            checkpoint=lambda partial: write(partial, out),  # an interrupt leaves the figures
        )
    except KeyboardInterrupt:
        done = f"; the finished evaluations are in {out}" if out.exists() else ""
        print(f"{interrupts.name()}{done}", file=sys.stderr)
        return interrupts.exit_code()
    write(doc, out)
    print(format_table(doc))
    print(f"wrote {out}")
    if args.json:
        print(json.dumps(doc))
    else:
        total = doc["total"]
        summary = {
            "kind": "evokernel-bench-eval-summary",
            "out": str(out),
            "hardware": doc["hardware"],
            "workers": doc["workers"],
            "evaluations": total["evaluations"],
            "evals_per_min": total["evals_per_min"],
            "gpu_held_s": total["gpu_held_s"],
            "phases_s": total["phases_s"],
            "false_rejections": total["false_rejections"],
            "screened": total["screened"],
        }
        print(json.dumps(summary))
    return 0
