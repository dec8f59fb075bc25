"""`evokernel report`: one self-contained HTML page for a run or for benchmark results.

    evokernel report RUN_DIR [--out FILE]
        RUN_DIR/report.html: evolution tree, progress, per-scenario speedups, the winner's
        diff against the seed, failures, LLM usage, evaluator phases, environment
    evokernel report BENCH-SERVE.json [--out FILE]
        a `bench serve` result: tok/s, TTFT and inter-token latency by concurrent streams
    evokernel report BENCH.json [BENCH2.json ...] [--out FILE] [--png DIR]
        `bench decode` results of one GPU: tok/s and % of the bandwidth floor by context
        position, P50/P99 latency; the page goes next to the first file (FIRST.html), and
        --png DIR also writes the plots as PNG files (needs matplotlib: evokernel[report])

The page loads nothing from the network; open it in any browser. Prints the path written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ORDER = 80


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="HTML report of an evolve run, or of bench decode result files",
        description="Write one self-contained HTML page (no network) for an evolve run "
        "directory (RUN_DIR/report.html) or for `bench decode` JSON files of one GPU.",
    )
    p.add_argument(
        "paths",
        type=Path,
        nargs="+",
        metavar="RUN_DIR | BENCH.json",
        help="a run directory, or one or more bench decode result files",
    )
    p.add_argument("--out", type=Path, help="where to write the page (default: see above)")
    p.add_argument(
        "--png",
        type=Path,
        metavar="DIR",
        help="bench files only: also write the main plots as PNG files into DIR",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evokernel.errors import EvokernelError

    paths: list[Path] = args.paths
    dirs = [p for p in paths if p.is_dir()]
    if dirs:
        if len(paths) > 1:
            raise EvokernelError("report takes one RUN_DIR, or bench decode JSON files, not both")
        if args.png is not None:
            raise EvokernelError("--png is for bench decode files; a run report draws its plots")
        from evokernel.report.run_page import write_run_report

        out = write_run_report(dirs[0], args.out)
        print(f"wrote {out}")
        return 0
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise EvokernelError(f"no such run directory or file: {missing[0]}")
    from evokernel.report.serve_page import is_serve_result, write_serve_report

    if is_serve_result(paths[0]):
        if len(paths) > 1 or args.png is not None:
            raise EvokernelError("report takes one bench serve file (and no --png)")
        print(f"wrote {write_serve_report(paths[0], args.out)}")
        return 0
    from evokernel.report.bench_page import write_bench_report

    out = write_bench_report(paths, args.out)
    print(f"wrote {out}")
    if args.png is not None:
        from evokernel.report.plots import write_bench_pngs

        for png in write_bench_pngs(paths, args.png):
            print(f"wrote {png}")
    return 0
