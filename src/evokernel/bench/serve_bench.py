"""`evokernel bench serve`: the server under N concurrent streaming clients, beside `generate`.

    doc = run_serve_bench(ServeBenchOptions(model_dir=Path("ckpt"), device="cuda", ...))

In one run:
  1. `generate` at batch 1 in this process, for each prompt length (the engine's own figure:
     prefill ms and decode tok/s, warm), then the model is freed;
  2. `evokernel serve` starts as a child process on a free port (--max-batch = the largest
     concurrency, --max-len = longest prompt + max_tokens rounded up to a power of two);
  3. a warm-up round (every prompt length once), then for each concurrency N, N clients
     (bench/serve_load.py) each stream `rounds_at(N)` requests of `max_tokens` greedy tokens:
     `rounds`, or more where N x rounds would fall short of `min_requests` (so that the low
     concurrencies, the single stream every ratio divides by first, are not timed on three
     requests);
  4. the server is stopped with SIGTERM.
Per concurrency: aggregate tok/s (tokens received / first send to last token), the median
per-stream decode rate (tokens after the first / their span), TTFT P50/P99 (send to first
token) and inter-token latency P50/P99 (gaps between a request's events), requests and errors,
and where the time went (`engine`: device time in decode steps and prefills, rows per step,
prefill speed, CPU of each process; bench/serve_accounts.py, from `/metrics` around the load).
The summary compares: single-stream tok/s through the server against `generate`'s decode
tok/s, aggregate tok/s at each N against N = 1 (and the ratio the decode steps alone would
allow, `decode_bound_vs_single`), TTFT P50 at N = 1 against `generate`'s prefill
time per prompt length. Writes JSON (kind "evokernel-bench-serve", schema 1) and CSV.
"""

from __future__ import annotations

import csv
import gc
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evokernel.bench.serve_accounts import FIELDS as ENGINE_FIELDS
from evokernel.bench.serve_accounts import accounts, scrape
from evokernel.bench.serve_load import RequestRecord, drive
from evokernel.errors import EvokernelError

KIND = "evokernel-bench-serve"
SCHEMA = 1
READY = re.compile(r"^serving (\S+) on (http://\S+) ")
COLUMNS = (
    "concurrency",
    "requests",
    "errors",
    "tokens",
    "wall_s",
    "tok_s",
    "stream_tok_s_p50",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "itl_ms_p50",
    "itl_ms_p99",
    *(f"engine_{f}" for f in ENGINE_FIELDS),
)


@dataclass(frozen=True)
class ServeBenchOptions:
    model_dir: Path
    device: str
    out: Path
    concurrencies: tuple[int, ...] = (1, 4, 8, 16, 32)
    prompt_lens: tuple[int, ...] = (32, 256, 1024)
    max_tokens: int = 128
    rounds: int = 3
    min_requests: int = 24  # requests at each concurrency at least (more rounds where needed)
    server_args: tuple[str, ...] = ()  # flag-value pairs for `serve` and `generate` (--ops ...)
    serve_args: tuple[str, ...] = ()  # further `serve` flags only (--prefill-budget N ...)
    baseline: bool = True
    start_timeout_s: float = 900.0
    command: str = ""

    def rounds_at(self, concurrency: int) -> int:
        """Requests each of `concurrency` clients sends, in sequence."""
        return max(self.rounds, -(-self.min_requests // concurrency))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(concurrency: int, records: list[RequestRecord]) -> dict[str, Any]:
    good = [r for r in records if not r.error and r.arrivals]
    tokens = sum(len(r.arrivals) for r in good)
    wall = (max(r.arrivals[-1] for r in good) - min(r.sent for r in good)) if good else 0.0
    ttft = [(r.arrivals[0] - r.sent) * 1e3 for r in good]
    itl = [(b - a) * 1e3 for r in good for a, b in zip(r.arrivals, r.arrivals[1:])]
    streams = [
        (len(r.arrivals) - 1) / (r.arrivals[-1] - r.arrivals[0])
        for r in good
        if len(r.arrivals) > 1 and r.arrivals[-1] > r.arrivals[0]
    ]
    by_len: dict[str, float | None] = {}
    for n in sorted({r.prompt_len for r in good}):
        by_len[str(n)] = percentile([t for t, r in zip(ttft, good) if r.prompt_len == n], 50)
    errors = [r.error for r in records if r.error]
    return {
        "concurrency": concurrency,
        "requests": len(records),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "tokens": tokens,
        "usage_tokens": sum(r.completion_tokens for r in good),
        "wall_s": wall,
        "tok_s": tokens / wall if wall > 0 else None,
        "stream_tok_s_p50": percentile(streams, 50),
        "ttft_ms_p50": percentile(ttft, 50),
        "ttft_ms_mean": statistics.fmean(ttft) if ttft else None,
        "ttft_ms_p99": percentile(ttft, 99),
        "ttft_ms_p50_by_prompt_len": by_len,
        "itl_ms_p50": percentile(itl, 50),
        "itl_ms_p99": percentile(itl, 99),
    }


def make_prompts(lengths: tuple[int, ...], vocab: int, seed: int = 0) -> list[list[int]]:
    """Token ids drawn from the vocabulary's first 32k ids (the ordinary tokens of most
    tokenizers), one prompt per length."""
    rng = random.Random(seed)
    top = min(vocab, 32000)
    return [[rng.randrange(1, top) for _ in range(n)] for n in lengths]


def generate_baseline(opts: ServeBenchOptions, prompts: list[list[int]]) -> dict[str, Any]:
    """`generate` at batch 1, warm, per prompt length; the model is freed afterwards."""
    import torch

    from evokernel.engine.generate import GenerateOptions, generate
    from evokernel.engine.loading import load_engine

    flags = dict(zip(opts.server_args[::2], opts.server_args[1::2]))
    ops = flags.get("--ops") or ("triton" if opts.device == "cuda" else "torch")
    need = max(len(p) for p in prompts) + opts.max_tokens
    model = load_engine(
        opts.model_dir,
        opts.device,
        flags.get("--dtype"),
        ops,
        max_seq_len=need,
        kernels=flags.get("--kernels"),
    )
    rows = []
    options = GenerateOptions(max_new_tokens=opts.max_tokens, eos_token_ids=())
    for prompt in prompts:
        generate(model, [prompt], options)  # warm: compiles, captures, fills the caches
        r = generate(model, [prompt], options)
        rows.append(
            {
                "prompt_len": len(prompt),
                "prefill_ms": r.prefill_ms,
                "decode_tok_s": r.decode_tok_s,
                "decode_steps": r.decode_steps,
                "cuda_graph": r.cuda_graph,
            }
        )
    del model
    gc.collect()
    if opts.device == "cuda":
        torch.cuda.empty_cache()
    return {
        "ops": ops,
        "rows": rows,
        "decode_tok_s": statistics.median(r["decode_tok_s"] for r in rows),
    }


class _Server:
    def __init__(self, opts: ServeBenchOptions, max_len: int, progress: Callable[[str], None]):
        cmd = [
            sys.executable,
            "-m",
            "evokernel",
            "serve",
            "--model",
            str(opts.model_dir),
            "--port",
            "0",
            "--device",
            opts.device,
            "--max-batch",
            str(max(opts.concurrencies)),
            "--max-len",
            str(max_len),
            *opts.server_args,
            *opts.serve_args,
        ]
        self.command = " ".join(cmd[2:])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + opts.start_timeout_s
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            found = READY.match(line)
            if found:
                self.name, self.url, self.ready_line = found[1], found[2], line.strip()
                progress(self.ready_line)
                return
            if time.monotonic() > deadline:
                break
        self.stop()
        raise EvokernelError(f"the server did not start (exit code {self.proc.returncode})")

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def run_serve_bench(opts: ServeBenchOptions, progress: Callable[[str], None]) -> dict[str, Any]:
    from evokernel.bench.env import collect_env
    from evokernel.model.config import ModelConfig

    cfg = ModelConfig.from_dir(opts.model_dir)
    prompts = make_prompts(opts.prompt_lens, cfg.vocab_size)
    need = max(opts.prompt_lens) + opts.max_tokens
    max_len = min(cfg.max_position_embeddings, 1 << (need - 1).bit_length())
    env = collect_env(opts.device)
    baseline = None
    if opts.baseline:
        progress("generate at batch 1 (the engine alone) ...")
        baseline = generate_baseline(opts, prompts)
        for row in baseline["rows"]:
            progress(
                f"  generate prompt {row['prompt_len']}: prefill {row['prefill_ms']:.2f} ms, "
                f"decode {row['decode_tok_s']:.1f} tok/s"
            )
    server = _Server(opts, max_len, progress)
    results = []
    try:
        drive(server.url, server.name, 1, prompts, opts.max_tokens, len(prompts))  # warm-up
        for n in opts.concurrencies:
            before = scrape(server.url)
            records = drive(server.url, server.name, n, prompts, opts.max_tokens, opts.rounds_at(n))
            row = summarize(n, records)
            row["engine"] = accounts(before, scrape(server.url), row["wall_s"])
            results.append(row)
            e = row["engine"]
            progress(
                f"  {n:>3} streams: {_f(row['tok_s'])} tok/s, TTFT P50 "
                f"{_f(row['ttft_ms_p50'])} ms, ITL P50 {_f(row['itl_ms_p50'], '.3f')} ms"
                + (f", {row['errors']} errors ({row['first_error']})" if row["errors"] else "")
                + f"; device: decode {_f(e['decode_share'], '.0%')} ({_f(e['step_ms'], '.3f')} ms"
                f" x {_f(e['rows_per_step'], '.1f')} rows), prefill {_f(e['prefill_share'], '.0%')}"
                f", idle {_f(e['idle_share'], '.0%')}; TTFT mean {_f(row['ttft_ms_mean'])} ms"
                f" (in the server {_f(e['server_ttft_ms'])})"
            )
    finally:
        exit_code = server.stop()
    doc = {
        "kind": KIND,
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "command": opts.command,
        "server_command": server.command,
        "server": server.ready_line,
        "server_exit_code": exit_code,
        "env": env,
        "model": {
            "dir": str(opts.model_dir),
            "name": opts.model_dir.resolve().name,
            "hidden_size": cfg.hidden_size,
            "layers": cfg.num_hidden_layers,
        },
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
        "max_len": max_len,
        "baseline": baseline,
        "results": results,
        "summary": compare(results, baseline),
    }
    write(doc, opts.out)
    return doc


def decode_bound(row: dict[str, Any], one: dict[str, Any]) -> float | None:
    """The aggregate against one stream that `row`'s decode steps alone would allow: its
    rows per step over its step time (every device second in decode steps, none in prefills
    or idle) against the single stream's measured tok/s. What is left between this and the
    measured ratio is prefill and idle; what is left between it and N, the step's growth with
    its rows."""
    e = row.get("engine") or {}
    if not e.get("step_ms") or not e.get("rows_per_step") or not one.get("tok_s"):
        return None
    return float(e["rows_per_step"] / (e["step_ms"] * 1e-3) / one["tok_s"])


def compare(results: list[dict[str, Any]], baseline: dict[str, Any] | None) -> dict[str, Any]:
    by_n = {r["concurrency"]: r for r in results}
    one = by_n.get(1)
    out: dict[str, Any] = {"aggregate_vs_single": {}}
    if one and one["tok_s"]:
        for n, r in by_n.items():
            out["aggregate_vs_single"][str(n)] = r["tok_s"] / one["tok_s"] if r["tok_s"] else None
        peak = max(results, key=lambda r: r["tok_s"] or 0)
        out["peak_tok_s"] = peak["tok_s"]
        out["peak_concurrency"] = peak["concurrency"]
        out["decode_bound_vs_single"] = {str(n): decode_bound(r, one) for n, r in by_n.items()}
    if one and baseline:
        gen = baseline["decode_tok_s"]
        out["single_stream_vs_generate"] = (
            one["stream_tok_s_p50"] / gen if one["stream_tok_s_p50"] and gen else None
        )
        out["ttft_p50_vs_prefill"] = {
            str(row["prompt_len"]): (
                one["ttft_ms_p50_by_prompt_len"].get(str(row["prompt_len"])) or 0
            )
            / row["prefill_ms"]
            for row in baseline["rows"]
            if row["prefill_ms"]
        }
    return out


def write(doc: dict[str, Any], out: Path) -> None:
    import json

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    with out.with_suffix(".csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in doc["results"]:
            engine = r.get("engine") or {}
            w.writerow([engine.get(c[7:]) if c.startswith("engine_") else r[c] for c in COLUMNS])


def load(path: Path) -> dict[str, Any]:
    """A bench serve result file, or a one-line error."""
    import json

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise EvokernelError(f"{path}: not a readable JSON file ({err})") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND or doc.get("schema") != SCHEMA:
        raise EvokernelError(f"{path}: not a bench serve result (kind {KIND}, schema {SCHEMA})")
    return doc


def _f(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)
