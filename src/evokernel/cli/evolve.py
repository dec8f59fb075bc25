"""`evokernel evolve`: run, or resume, an evolutionary search in a run directory.

    evokernel evolve --task TASK [--config FILE.yaml] [--iterations N] [--out RUN_DIR]
                     [--resume] [--device cuda|cpu] [--seed N] [--json]
                     [--backend local|ray] [--ray-address ADDR]
    evokernel evolve --task TASK --program START.py [...]   start from START.py, not the seed
    evokernel evolve --program P.py --evaluator E.py [same options]
                     [--config openevolve.yaml] [--strict] [--offline]

Live progress while it runs; at the end a per-scenario summary table (the dispatch table),
and RUN_DIR/best.py, dispatch.json and summary.json. `--json` ends stdout with one JSON line
(the summary). `--config` takes this search's YAML or an OpenEvolve `config.yaml` (its keys
without an equivalent are one warning line). The LLM endpoints are probed before the run
starts (a warning line each when unreachable or when the key variable is unset). `--strict`
makes those warnings errors; `--offline` drops the LLM mutators.

Exit 0 when the run stopped normally; 1 when no child program could be proposed (the line
says why); 130 on SIGINT and 143 on SIGTERM (the run stops cleanly, leaves no scratch
directory, and the line to resume it is printed); 2 with one line on stderr for bad input or
a backend that cannot evaluate. `--backend ray` evaluates on a Ray cluster
(docs/scale-out.md); a resumed run may change its backend, nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evokernel.cli import interrupts

ORDER = 70


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evolve",
        help="evolutionary search for a faster kernel (or any EVOLVE-BLOCK program)",
        description="Evolve a kernel task's seed (--task) or a generic program scored by your "
        "evaluator (--program, --evaluator). Checkpoints every program in RUN_DIR.",
    )
    p.add_argument("--task", help="kernel task name (see `evokernel tasks`)")
    p.add_argument(
        "--program",
        type=Path,
        help="program with an EVOLVE-BLOCK: the start (instead of the task's seed) with --task; "
        "the program of a generic task with --evaluator",
    )
    p.add_argument(
        "--evaluator",
        type=Path,
        help="generic task: file defining evaluate(path) (and evaluate_stage1/2/3) returning "
        "a dict of metrics or an EvaluationResult",
    )
    p.add_argument(
        "--config",
        type=Path,
        help="YAML overriding evolve/default_config.yaml, or an OpenEvolve config.yaml",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse OpenEvolve config keys without an equivalent and unusable LLM endpoints "
        "(default: one warning line each)",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="the built-in mutators only: drop the LLM mutators and models of the config",
    )
    p.add_argument(
        "--iterations",
        type=int,
        help="iterations of the run (budget.iterations, at most 1000000); with --resume, a new "
        "target",
    )
    p.add_argument("--out", type=Path, help="run directory (default runs/<task>-<time>)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out (only --iterations, --backend, --ray-address may change)",
    )
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when present")
    p.add_argument("--seed", type=int, help="seed of the search's random choices")
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        help="where evaluations run (backend.kind): local = this machine, one worker per GPU; "
        "ray = a Ray cluster (pip install 'evokernel[ray]')",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="Ray cluster to use (backend.address): HOST:PORT, ray://HOST:PORT or auto; "
        "default: $RAY_ADDRESS, else a new local cluster",
    )
    p.add_argument("--json", action="store_true", help="end stdout with the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evokernel.evolve.session import Request, open_session

    interrupts.catch_signals()
    req = Request(
        task=args.task,
        program=args.program,
        evaluator=args.evaluator,
        config=args.config,
        iterations=args.iterations,
        out=args.out,
        resume=args.resume,
        device=args.device,
        seed=args.seed,
        backend=args.backend,
        ray_address=args.ray_address,
        strict=args.strict,
        offline=args.offline,
    )
    try:
        session = open_session(req)
    finally:
        for line in req.warnings:
            print(f"warning: {line}", file=sys.stderr, flush=True)
    try:
        try:
            outcome = session.execute()
        finally:
            session.close()
    except KeyboardInterrupt:
        _resume_hint(session.run.path)
        return interrupts.exit_code()
    print(outcome.text())
    for line in outcome.notes:
        print(f"warning: {line}", file=sys.stderr)
    if outcome.stop_reason == "interrupted":
        _resume_hint(session.run.path)
    if args.json:
        print(json.dumps({**outcome.summary.to_dict(), "run_dir": str(session.run.path)}))
    if outcome.stop_reason == "interrupted":
        return interrupts.exit_code()
    if outcome.problem:
        print(f"error: {outcome.problem}", file=sys.stderr)
        return 1
    return 0


def _resume_hint(run_dir: Path) -> None:
    print(
        f"{interrupts.name()}: resume with evokernel evolve --resume --out {run_dir}",
        file=sys.stderr,
    )
