"""The decode step's kernels on the device's clock: when each starts and ends, inside one CUDA
graph replay, from the profiler's kernel records (CUPTI).

    PYTHONPATH=src python3 scripts/gpu/step_timeline.py --model DIR [--position 33]
        [--variant default] [--cache N] [--batch B] [--out timeline.json]

Captures the engine's greedy decode step (Triton op set, bf16, PDL where supported) as the
benchmarks do (B rows, each at the position, with --batch), replays it warm, then profiles a
few replays. For the middle replay it prints, per kernel in launch order of one layer (the
middle layer) and summed over all layers by kernel name: the kernel's duration (its first
block's start to its last block's end) and its start relative to the previous kernel's end
(negative: it started while the previous kernel was still running, which programmatic
dependent launch allows). Writes every kernel record of that replay as JSON. The profiler
may itself change the timing: the script prints the replay's span with and without it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch


def kernel_records(trace_path: str) -> list[dict]:
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    return sorted(kernels, key=lambda e: float(e["ts"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--position", type=int, default=33)
    parser.add_argument("--variant", default="default", help="a decode_stages variant")
    parser.add_argument("--replays", type=int, default=5)
    parser.add_argument(
        "--cache", type=int, default=None, help="KV cache positions (default: position + 256)"
    )
    parser.add_argument("--batch", type=int, default=1, help="rows of the step")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    from evokernel import device as devices

    devices.prepare("cuda")
    from evokernel.bench.decode_stages import VARIANTS, capture, graph_us
    from evokernel.engine.graph import context_buckets
    from evokernel.engine.loading import load_engine
    from evokernel.ops.decode import DEFAULT
    from evokernel.ops.registry import OpSet, pdl_supported

    overrides = VARIANTS[args.variant]
    tuning = DEFAULT._replace(**{k: v for k, v in overrides.items() if k not in ("pdl", "ops")})
    model = load_engine(args.model, "cuda", torch.bfloat16, "torch")
    model.ops = OpSet.triton(pdl=overrides.get("pdl", pdl_supported()), tuning=tuning)
    if args.cache is not None and args.cache <= args.position:
        print("error: --cache must exceed --position", file=sys.stderr)
        return 2
    B = args.batch
    cache = model.new_cache(B, args.cache or args.position + 256)
    for t in (*cache.k, *cache.v):
        t.normal_()
    bounds = context_buckets(cache.max_seq_len)
    bound = next((b for b in bounds if b >= args.position + 64), bounds[-1])
    tokens = torch.zeros(B, dtype=torch.int64, device="cuda")
    pos = torch.zeros(B, dtype=torch.int32, device="cuda")
    lens = torch.ones(B, dtype=torch.int32, device="cuda")

    def reset() -> None:
        pos.fill_(args.position - 1)
        lens.fill_(args.position)

    def decode_step() -> None:
        model.decode_greedy(tokens, pos, lens, cache, bound)

    plain_us = graph_us(decode_step, 20, reset)  # its own capture, timed without the profiler
    graph = capture(decode_step, reset)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.replays):
            reset()
            graph.replay()
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        kernels = kernel_records(path)
    per_replay = len(kernels) // args.replays
    if per_replay == 0 or len(kernels) % args.replays:
        print(f"error: {len(kernels)} kernel records for {args.replays} replays", file=sys.stderr)
        return 1
    mid = args.replays // 2
    step = kernels[mid * per_replay : (mid + 1) * per_replay]
    t0 = float(step[0]["ts"])
    rows: list[dict] = []
    prev_end = 0.0
    for k in step:
        start, dur = float(k["ts"]) - t0, float(k["dur"])
        gap = start - prev_end  # the first kernel's: 0
        rows.append({"name": k["name"], "start_us": start, "dur_us": dur, "gap_us": gap,
                     "grid": k.get("args", {}).get("grid")})  # fmt: skip
        prev_end = start + dur
    span = rows[-1]["start_us"] + rows[-1]["dur_us"]
    layers = model.cfg.num_hidden_layers
    # A layer starts at its qkv kernel (the first kernel name that occurs once per layer).
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts[r["name"]] += 1
    starts = [i for i, r in enumerate(rows) if counts[r["name"]] == layers]
    starts = [i for i in starts if rows[i]["name"] == rows[starts[0]]["name"]]
    first = starts[len(starts) // 2]
    per_layer = starts[1] - starts[0] if len(starts) > 1 else 0
    print(f"{torch.cuda.get_device_name()}, batch {B}, position {args.position}, "
          f"variant {args.variant}: "
          f"{len(rows)} kernels, replay span {span:.1f} us profiled, {plain_us:.1f} us plain "
          f"(events around one replay)")  # fmt: skip
    print(f"layer {layers // 2} (kernel, duration us, start after the previous kernel's end us, "
          "end after the previous kernel's end us):")  # fmt: skip
    for r in rows[first : first + per_layer]:
        step_us = r["dur_us"] + r["gap_us"]
        print(f"  {r['name'][:40]:<40} {r['dur_us']:7.2f} {r['gap_us']:+7.2f} {step_us:7.2f}")
    by_name: dict[str, list[dict]] = defaultdict(list)
    for r in rows[starts[0] :]:
        by_name[r["name"]].append(r)
    print("over the step, by kernel (count, median duration, median start gap, median and sum "
          "of end after the previous kernel's end):")  # fmt: skip
    for name, rs in by_name.items():
        durs = [r["dur_us"] for r in rs]
        gaps = [r["gap_us"] for r in rs]
        ends = [d + g for d, g in zip(durs, gaps, strict=True)]
        print(f"  {name[:40]:<40} x{len(rs):<3} dur {statistics.median(durs):6.2f} "
              f"gap {statistics.median(gaps):+6.2f}  end {statistics.median(ends):6.2f} "
              f"sum {sum(ends):7.1f}")  # fmt: skip
    if args.out:
        doc = {"gpu": torch.cuda.get_device_name(), "batch": B, "position": args.position,
               "variant": args.variant, "plain_us": plain_us, "kernels": rows}  # fmt: skip
        args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
