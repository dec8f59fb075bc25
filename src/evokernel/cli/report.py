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

Checked before anything is read or drawn: a RUN_DIR must hold a run (programs.sqlite; a tune
PACK_DIR is pointed to its runs/<task>), a BENCH file must be a regular file (a FIFO is never
opened), and every file the command writes (the page, the PNGs) may only replace a regular
file: a device, FIFO or directory there, or a link leading under /proc, /sys or /dev, is
refused and left as it is. The page loads nothing from the network; open it in any browser.
Prints the paths written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evokernel.cli import args as checked

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
        nargs="+",
        metavar="RUN_DIR | BENCH.json",
        help="a run directory, or one or more bench decode result files",
    )
    p.add_argument("--out", help="where to write the page (default: see above)")
    p.add_argument(
        "--png",
        metavar="DIR",
        help="bench files only: also write the main plots as PNG files into DIR",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evokernel.errors import EvokernelError

    paths = [_input(path) for path in args.paths]
    dirs = [p for p in paths if p.is_dir()]
    if dirs:
        if len(paths) > 1:
            raise EvokernelError("report takes one RUN_DIR, or bench decode JSON files, not both")
        if args.png is not None:
            raise EvokernelError("--png is for bench decode files; a run report draws its plots")
        run_dir = _run_dir(dirs[0])
        out = checked.output_file(args.out or run_dir / "report.html", _out_flag(args))
        from evokernel.report.run_page import write_run_report

        print(f"wrote {write_run_report(run_dir, out)}")
        return 0
    from evokernel.report.bench_page import default_out, write_bench_report
    from evokernel.report.serve_page import is_serve_result, write_serve_report

    out = checked.output_file(args.out or default_out(paths[0]), _out_flag(args))
    if is_serve_result(paths[0]):
        if len(paths) > 1 or args.png is not None:
            raise EvokernelError("report takes one bench serve file (and no --png)")
        print(f"wrote {write_serve_report(paths[0], out)}")
        return 0
    png = None
    if args.png is not None:
        from evokernel.report.plots import PNG_NAMES

        png = checked.output_dir(args.png, "--png")
        for name in PNG_NAMES:
            checked.output_file(png / name, "--png")
    print(f"wrote {write_bench_report(paths, out)}")
    if png is not None:
        from evokernel.report.plots import write_bench_pngs

        for image in write_bench_pngs(paths, png):
            print(f"wrote {image}")
    return 0


def _out_flag(args: argparse.Namespace) -> str:
    return "--out" if args.out is not None else "the page (default --out)"


def _input(path: str) -> Path:
    """A run directory, or a bench file that is a regular file (never opened otherwise)."""
    from evokernel.errors import EvokernelError

    p = Path(path)
    if p.is_dir():
        return checked.existing_dir(p, "RUN_DIR")
    if not p.exists() and not p.is_symlink():
        raise EvokernelError(f"no such run directory or file: {p}")
    return checked.regular_file(p, "BENCH.json")


def _run_dir(path: Path) -> Path:
    """`path` if it holds a run; else a one-line error saying what it is and what to give."""
    from evokernel.engine.packs.format import PACK_FILE, RUNS_DIR
    from evokernel.errors import EvokernelError
    from evokernel.evolve.rundir import DB_NAME

    if (path / DB_NAME).exists():
        return path
    runs = sorted(p for p in (path / RUNS_DIR).glob("*") if (p / DB_NAME).exists())
    if (path / PACK_FILE).exists() or runs:
        where = f"; its searches: {', '.join(str(r) for r in runs)}" if runs else ""
        raise EvokernelError(
            f"{path} is a kernel pack, not a run: report one of its searches "
            f"(evokernel report {path / RUNS_DIR}/<task>){where}"
        )
    raise EvokernelError(
        f"{path} holds no run (no {DB_NAME}): give an evolve run directory (evolve --out, or "
        "a tune pack's runs/<task>) or bench decode JSON files"
    )
