"""`evokernel tune`: search the engine's kernel tasks at a checkpoint's shapes; write a pack.

    evokernel tune --model DIR --out PACK_DIR [--budget-minutes M] [--iterations N]
                   [--device cuda|cpu] [--config FILE.yaml] [--json]

Runs (or resumes) one search per engine task in PACK_DIR/runs/<task> (evokernel.tune.search),
then writes PACK_DIR/pack.json and PACK_DIR/programs/ (evokernel.tune.write) and prints each
run's summary, the pack's dispatch table and its path. Use the pack with `--kernels PACK_DIR`
on generate, verify and bench decode. Exit 0 when the pack is written; 2 with one line on
stderr for bad input; interrupted by SIGINT (Ctrl-C) or SIGTERM, it stops the search, writes
no pack, leaves no scratch directory and exits 130 or 143, printing the command that resumes
the run (the same one).
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from evokernel.cli import args as checked

ORDER = 72


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune",
        help="search the engine's kernels at a checkpoint's shapes and write a kernel pack",
        description=(
            "For every engine task (today: decode_layer, one decoder layer's decode step) at "
            "the checkpoint's shapes, run the evolutionary search of `evokernel evolve` on this "
            "device into PACK_DIR/runs/<task> (running tune again on the same PACK_DIR resumes "
            "it), then write the kernel pack: PACK_DIR/pack.json (the device, software versions, "
            "model shape and, per engine context bucket, the chosen program or the baseline "
            "with its measured speedup) and PACK_DIR/programs/. A bucket gets a program only "
            "where its 95% speedup interval lies wholly above 1; on the CPU nothing is timed, "
            "so every bucket keeps the baseline. On a quantized checkpoint there is no layer "
            "program to search (the programs take dense projections): tune measures each packed "
            "projection's launch (dequantisation mode, warps, tile) on its own weights and the "
            "pack keeps, per context bucket, those the whole decode step confirms, timed "
            "interleaved on this GPU (a fixed sweep, about 1.5 minutes a format on an H100; "
            "--budget-minutes bounds it: no setting is measured and no confirmation starts "
            "after the budget is spent, projections not reached keep the table's setting, and "
            "nothing unconfirmed is kept; --iterations does not apply to it). "
            "Use it with --kernels PACK_DIR on generate, verify and bench decode."
        ),
    )
    p.add_argument("--model", required=True, metavar="DIR", help="checkpoint directory")
    p.add_argument(
        "--out",
        required=True,
        metavar="PACK_DIR",
        help="the pack directory (created if absent; a pack already there must be for this "
        "GPU model and model shape)",
    )
    p.add_argument(
        "--budget-minutes",
        metavar="M",
        help="wall-clock budget of this invocation, shared by the tasks: no new iteration "
        "starts after it (those in flight finish); without --iterations the search runs until "
        "the budget is spent",
    )
    p.add_argument(
        "--iterations",
        metavar="N",
        help="iteration target of each task's run (as evolve --iterations); default: no "
        "limit with --budget-minutes, else the config's budget.iterations (10) for a new run "
        "and its own target for a resumed one",
    )
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when present")
    p.add_argument(
        "--config",
        metavar="FILE.yaml",
        help="search configuration over evolve/default_config.yaml (mutators, islands, "
        "evaluator); a resumed run keeps its own and accepts only the same file",
    )
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line")
    p.set_defaults(func=run)


class _Signals:
    """SIGINT and SIGTERM as KeyboardInterrupt, the first one only: a second signal while the
    search shuts down (workers stopped, the run's state recorded) is noted and ignored, so the
    shutdown completes and leaves nothing behind."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
            raise KeyboardInterrupt


def resume_command(args: argparse.Namespace) -> str:
    """The tune command that resumes this one's run (the same flags)."""
    parts = ["evokernel", "tune", "--model", args.model, "--out", args.out]
    for flag, value in (
        ("--budget-minutes", args.budget_minutes),
        ("--iterations", args.iterations),
        ("--device", args.device),
        ("--config", args.config),
    ):
        if value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)


def run(args: argparse.Namespace) -> int:
    from evokernel.tune.search import TuneRequest, tune
    from evokernel.tune.write import format_pack

    model = checked.existing_dir(args.model, "--model")
    out = checked.output_dir(args.out, "--out")
    config = checked.regular_file(args.config, "--config") if args.config is not None else None
    budget = (
        checked.real(args.budget_minutes, "--budget-minutes", lo=0.0, lo_open=True)
        if args.budget_minutes is not None
        else None
    )
    iterations = (
        checked.integer(args.iterations, "--iterations", lo=0)
        if args.iterations is not None
        else None
    )
    request = TuneRequest(model, out, budget, iterations, args.device, config)
    with _Signals() as signals:
        try:
            outcome = tune(request, stream=sys.stdout)
        except KeyboardInterrupt:
            code = 128 + (signals.received or signal.SIGINT)
            name = signal.Signals(code - 128).name
            print(
                f"interrupted ({name}): no pack written; the search in {Path(out) / 'runs'} "
                f"resumes with the same command: {resume_command(args)}",
                file=sys.stderr,
            )
            return code
    for r in outcome.runs:
        print(r.text)
    print(format_pack(outcome.pack))
    print(f"wrote {outcome.pack.path / 'pack.json'}: use it with --kernels {outcome.pack.path}")
    if args.json:
        record = {
            "pack": str(outcome.pack.path),
            "runs": {r.task: {"run_dir": str(r.run_dir), "stop_reason": r.stop_reason,
                              "resumed": r.resumed} for r in outcome.runs},
            **outcome.pack.to_dict(),
        }  # fmt: skip
        print(json.dumps(record))
    return 0
