"""`evokernel bench decode`: decode throughput by context position, ours and the baselines.
(`evokernel bench eval`, the evaluator's throughput, lives in bench_eval.py.)

    evokernel bench decode --model DIR [--suite quick|full] [--baselines LIST] [--steps N]
        [--warmup N] [--positions 1,128,...] [--device cuda|cpu] [--dtype D]
        [--ops torch|triton] [--kernels PACK_DIR] [--power-window-ms MS] [--max-minutes M]
        [--quantized DIR ...] [--quantized-kernels PACK_DIR ...] [--out FILE.json]
        [--json]
    evokernel bench decode --compare A.json B.json [--json]

stdout: a table, then one JSON line (the summary: file paths, tok/s per system and position;
with --json it also holds every result row). Progress goes to stderr, one line per system and
position. Exit 0 when the result file is written, failed rows included (they carry `error`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from evokernel.cli import args as checked
from evokernel.cli.generate import add_engine_args
from evokernel.errors import EvokernelError

ORDER = 40
DEFAULT_BASELINES = "evokernel,gptfast,hf_eager,hf_compile,vllm"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench", help="benchmarks: batch-1 decode by context position, evaluator throughput"
    )
    verbs = p.add_subparsers(dest="bench_verb", metavar="BENCH")
    verbs.required = True
    d = verbs.add_parser(
        "decode",
        help="decode tok/s, latency percentiles and %% of the bandwidth floor, ours and baselines",
        description=(
            "Batch-1 decode of one checkpoint by our engine and each baseline, in this one "
            "process: per context position, prefill a prompt of that many tokens (TTFT), then "
            "time each decode step (CUDA events) -> tok/s from the median step, ms/token "
            "P50/P95/P99, % of the bandwidth floor (weights + KV bytes over the copy bandwidth "
            "measured in this run) and tok/J (NVML). Writes JSON and CSV (docs/bench.md). "
            "Suites: quick = positions 1,128,512,1024,4096; full = also 384, 3000, 8192, 16384, "
            "32768 (a row in every context bucket; positions past the model's context move "
            "down to the last that fits); both "
            "64 timed steps after 8 warm-up steps. Without CUDA it runs a labelled smoke test "
            "(positions 1,128,320, 8 steps, compile backend eager): no speed claim."
        ),
    )
    d.add_argument("--model", metavar="DIR", help="checkpoint directory (HF layout)")
    d.add_argument(
        "--suite", choices=("quick", "full"), default=None, help="default quick (CPU: smoke)"
    )
    d.add_argument(
        "--baselines",
        default=DEFAULT_BASELINES,
        metavar="LIST",
        help=f"systems to run, in order (default {DEFAULT_BASELINES}; vllm only when importable)",
    )
    d.add_argument("--steps", metavar="N", help="timed decode steps per position (>= 2)")
    d.add_argument("--warmup", metavar="N", help="untimed decode steps first (>= 0)")
    d.add_argument("--positions", metavar="LIST", help="context positions, e.g. 1,128,4096")
    add_engine_args(d)  # --device, --dtype, --ops, --kernels (our engine's op implementations)
    d.add_argument(
        "--quantized",
        action="append",
        default=[],
        metavar="DIR",
        help="also run our engine on this quantized checkpoint of --model's architecture "
        "(repeatable), each a system named after its format, with its floor from the bytes "
        "it reads beside the bf16 floor",
    )
    d.add_argument(
        "--quantized-kernels",
        action="append",
        default=[],
        metavar="PACK_DIR",
        help="a kernel pack `evokernel tune` wrote for one of the --quantized checkpoints "
        "(repeatable): that checkpoint also runs with it, as the system <name>+pack",
    )
    d.add_argument(
        "--power-window-ms",
        metavar="MS",
        help="how long the steps re-run under NVML power reading, in [0, 60000] (default 500; "
        "0: no power)",
    )
    d.add_argument(
        "--max-minutes",
        metavar="M",
        help="start no new measurement after M minutes, M > 0 (those rows get an error)",
    )
    d.add_argument(
        "--out",
        metavar="FILE.json",
        help="result file; the CSV goes next to it (default out/bench-decode-SUITE-TIME.json)",
    )
    d.add_argument(
        "--compare",
        nargs=2,
        metavar=("A.json", "B.json"),
        help="print B/A tok/s per system and position (same GPU only) and exit",
    )
    d.add_argument(
        "--json", action="store_true", help="the last JSON line also holds every result row"
    )
    d.set_defaults(func=run)
    from evokernel.cli import bench_eval, bench_serve

    bench_eval.add_to(verbs)
    bench_serve.add_to(verbs)


def run(args: argparse.Namespace) -> int:
    if args.compare:
        return _compare(args)
    if not args.model:
        raise EvokernelError("bench decode needs --model DIR (or --compare A.json B.json)")
    from evokernel.bench.decode import run_decode_bench

    opts = _options(args)
    doc = run_decode_bench(opts, progress=lambda line: print(line, file=sys.stderr, flush=True))
    _print_table(doc)
    csv_path = opts.out.with_suffix(".csv")
    print(f"wrote {opts.out} and {csv_path}")
    summary: dict[str, Any] = {
        "kind": "evokernel-bench-decode-summary",
        "out": str(opts.out),
        "csv": str(csv_path),
        "suite": doc["suite"],
        "label": doc["label"],
        "device": doc["env"]["device"],
        "gpu": doc["env"]["gpu"],
        "copy_gbps": doc["env"]["copy_gbps"],
        "systems": doc["systems"],
        "skipped": doc["skipped"],
        "rows": len(doc["results"]),
        "errors": sum(1 for r in doc["results"] if r["error"]),
        "tok_s": _by_system(doc, "tok_s"),
        "pct_floor": _by_system(doc, "pct_floor"),
    }
    if args.json:
        summary["results"] = doc["results"]
    print(json.dumps(summary))
    return 0


def _options(args: argparse.Namespace) -> Any:
    from evokernel import device as devices
    from evokernel.bench.decode import CPU_LABEL, SUITES, DecodeBenchOptions
    from evokernel.bench.systems import SYSTEM_NAMES
    from evokernel.cli.generate import resolve_ops
    from evokernel.model.loader import resolve_dtype

    device = devices.resolve(args.device)
    suite_name = (args.suite or "quick") if device == "cuda" else "smoke"
    if args.suite and device == "cpu":
        print(
            f"note: --suite {args.suite} needs CUDA; running the CPU smoke suite", file=sys.stderr
        )
    suite = SUITES[suite_name]
    systems = tuple(s for s in args.baselines.replace(" ", "").split(",") if s)
    unknown = [s for s in systems if s not in SYSTEM_NAMES]
    if unknown or not systems:
        raise EvokernelError(
            f"--baselines: unknown system {unknown[0] if unknown else '(none)'!r} "
            f"(known: {', '.join(SYSTEM_NAMES)})"
        )
    if len(set(systems)) != len(systems):
        raise EvokernelError("--baselines: a system is named twice")
    positions = (
        tuple(checked.int_list(args.positions, "--positions", lo=1))
        if args.positions is not None
        else suite.positions
    )
    dtype = devices.default_dtype(device) if args.dtype is None else resolve_dtype(args.dtype)
    steps = suite.steps if args.steps is None else checked.integer(args.steps, "--steps", lo=2)
    warmup = suite.warmup if args.warmup is None else checked.integer(args.warmup, "--warmup", lo=0)
    window = (
        suite.power_window_ms
        if args.power_window_ms is None
        else checked.real(args.power_window_ms, "--power-window-ms", lo=0.0, hi=60_000.0)
    )
    max_minutes = (
        None
        if args.max_minutes is None
        else checked.real(args.max_minutes, "--max-minutes", lo=0.0, lo_open=True)
    )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("out") / f"bench-decode-{suite_name}-{stamp}.json"
    if out.suffix != ".json":
        raise EvokernelError(f"--out must name a .json file, got {out}")
    checked.output_file(out, "--out")  # and the CSV beside it: both before any measurement
    checked.output_file(out.with_suffix(".csv"), "--out (its CSV)")
    dtype_name = str(dtype).removeprefix("torch.")
    ops = resolve_ops(args)
    kernels = _kernels(args)
    if kernels is not None and "evokernel_pack" not in systems:
        at = systems.index("evokernel") + 1 if "evokernel" in systems else len(systems)
        systems = (*systems[:at], "evokernel_pack", *systems[at:])
    if kernels is None and "evokernel_pack" in systems:
        raise EvokernelError("--baselines: evokernel_pack needs a kernel pack (--kernels)")
    quantized = tuple(checked.existing_dir(q, "--quantized") for q in args.quantized)
    quantized_kernels = tuple(
        checked.existing_dir(q, "--quantized-kernels") for q in args.quantized_kernels
    )
    command = (
        f"evokernel bench decode --model {args.model} --baselines {','.join(systems)} "
        f"--positions {','.join(map(str, positions))} --steps {steps} --warmup {warmup} "
        f"--device {device} --dtype {dtype_name} --ops {ops} --power-window-ms {window:g}"
        + (f" --suite {suite_name}" if device == "cuda" else "")
        + (f" --max-minutes {max_minutes:g}" if max_minutes is not None else "")
        + (f" --kernels {kernels}" if kernels is not None else "")
        + "".join(f" --quantized {q}" for q in quantized)
        + "".join(f" --quantized-kernels {q}" for q in quantized_kernels)
    )
    return DecodeBenchOptions(
        model_dir=Path(args.model),
        suite=suite_name,
        systems=systems,
        positions=positions,
        steps=steps,
        warmup=warmup,
        device=device,
        dtype=dtype,
        power_window_ms=window,
        out=out,
        command=command,
        max_minutes=max_minutes,
        engine_ops=ops,
        engine_kernels=kernels,
        quantized=quantized,
        quantized_kernels=quantized_kernels,
        label=CPU_LABEL.format(dtype=dtype_name) if device == "cpu" else None,
        fit_positions=args.positions is None,
    )


def _kernels(args: argparse.Namespace) -> Path | None:
    """--kernels, opened for the engine before anything runs (fit, trust, static check,
    import and self-check of every bucket: packs.use.open_pack; a refused pack is one line and
    exit 2, not a row of errors). The systems that load it later reuse this outcome."""
    from evokernel.cli.generate import kernels_dir, open_kernels

    open_kernels(args, Path(args.model), None)
    return kernels_dir(args)


def _by_system(doc: dict[str, Any], key: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in doc["results"]:
        out.setdefault(r["system"], {})[str(r["position"])] = r[key]
    return out


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _print_table(doc: dict[str, Any]) -> None:
    from evokernel.bench.paired import pair_line

    env, model = doc["env"], doc["model"]
    where = env["gpu"] or f"CPU ({env['cpu']})"
    print(
        f"bench decode: {model['name']} {model['dtype']} on {where}, copy bandwidth "
        f"{env['copy_gbps']:,.0f} GB/s, suite {doc['suite']}, {doc['options']['steps']} timed "
        f"steps per position" + (f"  [{doc['label']}]" if doc["label"] else "")
    )
    print(
        f"{'system':<15}{'position':>9}{'tok/s':>10}{'ms p50':>9}{'ms p95':>9}{'ms p99':>9}"
        f"{'% floor':>9}{'TTFT ms':>10}{'tok/J':>8}  error"
    )
    for r in doc["results"]:
        print(
            f"{r['system']:<15}{r['position']:>9}{_fmt(r['tok_s'], '.1f'):>10}"
            f"{_fmt(r['ms_p50'], '.4f'):>9}{_fmt(r['ms_p95'], '.4f'):>9}"
            f"{_fmt(r['ms_p99'], '.4f'):>9}{_fmt(r['pct_floor'], '.1f'):>9}"
            f"{_fmt(r['ttft_ms'], '.2f'):>10}{_fmt(r['tok_per_j'], '.2f'):>8}"
            f"  {r['error'] or ''}".rstrip()
        )
    for name, reason in doc.get("skipped", {}).items():
        print(f"{name:<15} skipped: {reason}")
    for entry in doc.get("paired", []):
        print(pair_line(entry))


def _compare(args: argparse.Namespace) -> int:
    from evokernel.bench.compare import compare_files

    a, b = (checked.regular_file(path, "--compare") for path in args.compare)
    c = compare_files(a, b)
    print(f"B/A decode tok/s on {c.gpu or c.device}: A = {c.a}, B = {c.b}")
    print(
        f"{'system':<15}{'position':>9}{'tok/s A':>10}{'tok/s B':>10}{'B/A':>8}"
        f"{'% floor A':>11}{'% floor B':>11}"
    )
    for r in c.ratios:
        print(
            f"{r.system:<11}{r.position:>9}{_fmt(r.tok_s_a, '.1f'):>10}"
            f"{_fmt(r.tok_s_b, '.1f'):>10}{_fmt(r.ratio, '.3f'):>8}"
            f"{_fmt(r.pct_floor_a, '.1f'):>11}{_fmt(r.pct_floor_b, '.1f'):>11}"
        )
    print(json.dumps(c.to_dict()))
    return 0
