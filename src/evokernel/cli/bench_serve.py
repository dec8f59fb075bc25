"""`evokernel bench serve`: concurrent streaming clients against `evokernel serve`.

    evokernel bench serve --model DIR [--concurrency 1,4,8,16,32] [--prompt-lens 32,256,1024]
        [--max-tokens 128] [--rounds 3] [--min-requests 24] [--device cuda|cpu] [--dtype D]
        [--ops torch|triton] [--kernels PACK_DIR] [--serve-args "FLAGS"] [--no-baseline]
        [--out FILE.json]

stdout: a table per concurrency (aggregate tok/s, per-stream tok/s, TTFT and inter-token P50/P99)
beside `generate`'s batch-1 figures from the same run, a table of where the time went (device
time in decode steps and prefills, rows per step, CPU of each process), then one JSON line (the
summary).
Progress goes to stderr. Writes JSON and CSV (default out/bench-serve-TIME.json); `evokernel
report FILE.json` draws it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from evokernel.cli import args as checked
from evokernel.errors import ConfigError

# flags bench serve gives the server itself (from the load or from its own flags)
OWNED_FLAGS = {
    "--model",
    "--port",
    "--host",
    "--device",
    "--max-batch",
    "--max-len",
    "--dtype",
    "--ops",
    "--kernels",
}


def add_to(verbs: argparse._SubParsersAction) -> None:
    """Add `serve` to the `bench` verbs (not a verb module of its own: no `register`)."""
    s = verbs.add_parser(
        "serve",
        help="the server under concurrent streaming clients: tok/s, TTFT, inter-token latency",
        description=(
            "Start `evokernel serve` on the checkpoint, drive it with N concurrent streaming "
            "clients per concurrency level (each sends --rounds greedy requests of --max-tokens "
            "tokens, prompts cycling through --prompt-lens), and report aggregate tok/s, TTFT and "
            "inter-token latency P50/P99 beside `generate`'s batch-1 prefill and decode figures "
            "measured first in the same run. Needs evokernel[serve]."
        ),
    )
    s.add_argument("--model", required=True, metavar="DIR", help="checkpoint directory")
    s.add_argument("--concurrency", default="1,4,8,16,32", metavar="LIST", help="streams at once")
    s.add_argument("--prompt-lens", default="32,256,1024", metavar="LIST", help="prompt tokens")
    s.add_argument("--max-tokens", default="128", metavar="N", help="tokens per request")
    s.add_argument("--rounds", default="3", metavar="N", help="requests per client, in sequence")
    s.add_argument(
        "--min-requests",
        default="24",
        metavar="N",
        help="requests at each concurrency at least: clients send more than --rounds where "
        "needed (default 24: the single stream sends 24)",
    )
    s.add_argument(
        "--device", choices=("cuda", "cpu"), default=None, help="default: cuda if present"
    )
    s.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default=None)
    s.add_argument("--ops", choices=("torch", "triton"), default=None)
    s.add_argument("--kernels", metavar="PACK_DIR", help="the server runs this kernel pack")
    s.add_argument(
        "--serve-args",
        default="",
        metavar='"FLAGS"',
        help='further `evokernel serve` flags, one quoted string (e.g. "--prefill-budget 4096")',
    )
    s.add_argument("--no-baseline", action="store_true", help="skip `generate` at batch 1")
    s.add_argument("--out", metavar="FILE.json", help="default out/bench-serve-TIME.json")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evokernel import device as devices
    from evokernel.bench.serve_bench import ServeBenchOptions, run_serve_bench

    model = checked.existing_dir(args.model, "--model")
    device = devices.resolve(args.device)
    concurrencies = tuple(checked.int_list(args.concurrency, "--concurrency"))
    lens = tuple(checked.int_list(args.prompt_lens, "--prompt-lens"))
    if any(n < 1 for n in concurrencies) or any(n < 1 for n in lens):
        raise ConfigError("--concurrency and --prompt-lens take positive integers")
    out = (
        Path(args.out)
        if args.out
        else Path("out") / f"bench-serve-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    if out.suffix != ".json":
        raise ConfigError(f"--out must name a .json file, got {out}")
    extra: list[str] = []
    for flag, value in (("--dtype", args.dtype), ("--ops", args.ops), ("--kernels", args.kernels)):
        if value is not None:
            extra += [flag, str(value)]
    serve_args = tuple(shlex.split(args.serve_args))
    owned = sorted({a.split("=", 1)[0] for a in serve_args} & OWNED_FLAGS)
    if owned:
        raise ConfigError(
            f"--serve-args may not set {', '.join(owned)}: bench serve sets it "
            "(--device, --dtype, --ops and --kernels are bench serve's own flags)"
        )
    opts = ServeBenchOptions(
        model_dir=model,
        device=device,
        out=out,
        concurrencies=concurrencies,
        prompt_lens=lens,
        max_tokens=checked.integer(args.max_tokens, "--max-tokens", lo=2),
        rounds=checked.integer(args.rounds, "--rounds", lo=1),
        min_requests=checked.integer(args.min_requests, "--min-requests", lo=1),
        server_args=tuple(extra),
        serve_args=serve_args,
        baseline=not args.no_baseline,
        command="evokernel " + " ".join(sys.argv[1:]),
    )
    doc = run_serve_bench(opts, progress=lambda line: print(line, file=sys.stderr, flush=True))
    _print(doc)
    print(f"wrote {out} and {out.with_suffix('.csv')}")
    summary = {
        "kind": "evokernel-bench-serve-summary",
        "out": str(out),
        "gpu": doc["env"]["gpu"],
        "device": device,
        **doc["summary"],
        "tok_s": {str(r["concurrency"]): r["tok_s"] for r in doc["results"]},
    }
    print(json.dumps(summary))
    return 0


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _print(doc: dict) -> None:
    env = doc["env"]
    where = env["gpu"] or f"CPU ({env.get('cpu') or '?'})"
    print(f"bench serve: {doc['model']['name']} on {where}; {doc['server']}")
    if doc["baseline"]:
        for row in doc["baseline"]["rows"]:
            print(
                f"  generate batch 1, prompt {row['prompt_len']:>5}: prefill "
                f"{row['prefill_ms']:8.2f} ms, decode {row['decode_tok_s']:9.1f} tok/s"
            )
    print(
        f"{'streams':>8}{'tok/s':>11}{'x single':>9}{'steps x':>8}{'stream':>9}{'TTFT p50':>10}"
        f"{'TTFT p99':>10}{'ITL p50':>9}{'ITL p99':>9}{'errors':>7}"
        "   (steps x: what the decode steps alone allow)"
    )
    ratios = doc["summary"].get("aggregate_vs_single", {})
    bounds = doc["summary"].get("decode_bound_vs_single", {})
    for r in doc["results"]:
        ratio = ratios.get(str(r["concurrency"]))
        print(
            f"{r['concurrency']:>8}{_f(r['tok_s'], '.1f'):>11}"
            f"{_f(ratio, '.2f'):>9}{_f(bounds.get(str(r['concurrency'])), '.2f'):>8}"
            f"{_f(r['stream_tok_s_p50'], '.1f'):>9}"
            f"{_f(r['ttft_ms_p50'], '.2f'):>10}{_f(r['ttft_ms_p99'], '.2f'):>10}"
            f"{_f(r['itl_ms_p50'], '.3f'):>9}{_f(r['itl_ms_p99'], '.3f'):>9}{r['errors']:>7}"
        )
    print(
        f"{'streams':>8}{'decode':>8}{'prefill':>8}{'idle':>6}{'step ms':>9}{'rows':>6}"
        f"{'bucket':>7}{'prefill ms':>11}{'prefill tok/s':>14}{'padding':>8}"
        f"{'engine CPU':>11}{'HTTP CPU':>9}{'host ms/turn':>13}{'wait':>6}{'GC e/h':>10}"
        "   (shares: of the wall time)"
    )
    for r in doc["results"]:
        e = r.get("engine") or {}
        print(
            f"{r['concurrency']:>8}{_f(e.get('decode_share'), '.0%'):>8}"
            f"{_f(e.get('prefill_share'), '.0%'):>8}{_f(e.get('idle_share'), '.0%'):>6}"
            f"{_f(e.get('step_ms'), '.3f'):>9}{_f(e.get('rows_per_step'), '.1f'):>6}"
            f"{_f(e.get('bucket_rows_per_step'), '.1f'):>7}{_f(e.get('prefill_ms'), '.2f'):>11}"
            f"{_f(e.get('prefill_tok_s'), ',.0f'):>14}{_f(e.get('prefill_padding'), '.2f'):>8}"
            f"{_f(e.get('engine_cpu'), '.2f'):>11}{_f(e.get('http_cpu'), '.2f'):>9}"
            f"{_f(e.get('host_ms_per_turn'), '.3f'):>13}{_f(e.get('wait_share'), '.0%'):>6}"
            f"{_f(e.get('engine_gc'), '.1%'):>5}/{_f(e.get('http_gc'), '.1%')}"
        )
    s = doc["summary"]
    if "single_stream_vs_generate" in s:
        ttft = ", ".join(f"prompt {k}: {_f(v, '.2f')}" for k, v in s["ttft_p50_vs_prefill"].items())
        print(
            "single stream through the server / generate: "
            f"{_f(s['single_stream_vs_generate'], '.3f')}; "
            f"TTFT P50 at 1 stream / generate's prefill: {ttft}"
        )
    if doc["env"]["device"] == "cpu":
        print("(CPU: a correctness run, not a speed figure)")
