"""The persistent decode step (ops/persistent.py) against the engine's per-layer step, on one GPU.

    PYTHONPATH=src python3 scripts/gpu/persistent_check.py --model DIR
        [--positions 1,1000,4000] [--attn-rows 112] [--timeline 1] [--out persistent.json]
    PYTHONPATH=src python3 scripts/gpu/persistent_check.py --model DIR --once   # one step, for ncu

1. Correctness at each position (random cache contents): the residual stream after the last
   layer and the appended K row against the per-layer step (cosine, relative error), the
   kernel's error flag, the greedy token; then 64 greedy tokens from one prompt, both ways.
2. Timing: the whole greedy step (layers + head) as a CUDA graph, 20 replays back to back,
   the engine before and after the persistent step in the same run, % of the byte floor
   (copy bandwidth measured here); and the layers alone.
3. Timeline (--timeline positions): one step with the kernel's globaltimer stamps, per stage
   of the middle layer the median and latest CTA (us from the first CTA's start), and the
   producer's issue of each stage's first chunk (P_*).
Prints a short table last and writes it all as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

import torch

STAMPS = {  # trace slot -> name (kernels/cuda/decode_persistent.cu)
    16: "qkv_in", 1: "qkv_done", 2: "att_qkv", 3: "att_done", 18: "o_in", 5: "o_done",
    20: "gu_in", 7: "gu_done", 22: "dn_in", 9: "dn_done",
    10: "P_qkv", 11: "P_o", 12: "P_gu", 13: "P_dn",
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--positions", default="1,1000,4000")
    parser.add_argument("--attn-rows", type=int, default=112)
    parser.add_argument("--timeline", default="1", help="positions to stamp ('' for none)")
    parser.add_argument("--once", action="store_true", help="one persistent step, nothing else")
    parser.add_argument(
        "--out", default=os.path.join(os.environ.get("OUT", "."), "persistent.json")
    )
    args = parser.parse_args(argv)

    from evokernel import device as devices

    devices.prepare("cuda")
    from evokernel.bench.decode_stages import copy_gbps, graph_us
    from evokernel.engine.graph import context_buckets
    from evokernel.engine.loading import load_engine
    from evokernel.ops.registry import OpSet

    model = load_engine(args.model, "cuda", torch.bfloat16, "triton")
    cfg, w = model.cfg, model.weights
    base = OpSet.triton(True)
    fast = base.retuned(persistent_max=1 << 30, persistent_attn_rows=args.attn_rows)
    positions = [int(p) for p in args.positions.split(",")]
    cache = model.new_cache(1, max(positions) + 200)
    for t in (*cache.k, *cache.v):
        t.normal_()
    tok = torch.tensor([123], device="cuda")
    if args.once:
        model.ops = fast
        pos = torch.tensor([0], device="cuda", dtype=torch.int32)
        for _ in range(3):
            model._decode_layers(tok, pos, pos + 1, cache, 256)
        torch.cuda.synchronize()
        return 0

    bounds = context_buckets(cache.max_seq_len)
    gbps = copy_gbps()
    layer_bytes = sum(
        t.nbytes
        for lw in w.layers
        for t in (lw.qkv_proj, lw.o_proj, lw.gate_up_proj, lw.down_proj, lw.input_norm)
    ) + sum(lw.post_attn_norm.nbytes for lw in w.layers)
    weight_bytes = layer_bytes + w.lm_head.nbytes + w.final_norm.nbytes
    kv_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 2
    out: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "copy_gbps": gbps}
    out.update(attn_rows=args.attn_rows, check={}, steps={})
    print(f"{out['gpu']}, copy {gbps:.0f} GB/s", flush=True)

    for p in positions:
        bound = next(b for b in bounds if b >= p + 40)
        pos = torch.tensor([p - 1], device="cuda", dtype=torch.int32)
        saved = [t.clone() for t in (*cache.k, *cache.v)]
        model.ops = base
        ref = model._decode_layers(tok, pos, pos + 1, cache, bound).float()
        k_ref = [t[0, :, p - 1].float().clone() for t in cache.k]
        for t, s in zip((*cache.k, *cache.v), saved, strict=True):
            t.copy_(s)
        model.ops = fast
        layers = model._persistent_layers(cache, bound)
        assert layers is not None, "the persistent step does not apply here"
        got = model._decode_layers(tok, pos, pos + 1, cache, bound).float()
        k_got = [t[0, :, p - 1].float() for t in cache.k]
        norm = model.ops.norm_logits
        eps = cfg.rms_norm_eps
        same = bool(
            norm(got.to(w.dtype), w.final_norm, w.lm_head, eps).argmax()
            == norm(ref.to(w.dtype), w.final_norm, w.lm_head, eps).argmax()
        )
        line = {
            "error": layers.error(),
            "cos": torch.nn.functional.cosine_similarity(got, ref).item(),
            "rel": ((got - ref).norm() / ref.norm()).item(),
            "k_max": max((a - b).abs().max().item() for a, b in zip(k_got, k_ref, strict=True)),
            "argmax_same": same,
        }
        out["check"][str(p)] = line
        print(f"check position {p}: {line}", flush=True)
        for t, s in zip((*cache.k, *cache.v), saved, strict=True):
            t.copy_(s)

    def greedy(ops: OpSet) -> list[int]:
        model.ops = ops
        c = model.new_cache(1, 128)
        t = torch.tensor([7], device="cuda")
        pos = torch.zeros(1, device="cuda", dtype=torch.int32)
        lens = torch.ones(1, device="cuda", dtype=torch.int32)
        seq = []
        for _ in range(64):
            model.decode_greedy(t, pos, lens, c, 128)
            seq.append(int(t.item()))
        return seq

    agree = sum(a == b for a, b in zip(greedy(base), greedy(fast), strict=True))
    out["greedy_agree_of_64"] = agree
    print(f"greedy tokens: {agree}/64 equal", flush=True)

    tok0 = torch.zeros(1, dtype=torch.int64, device="cuda")
    pos = torch.zeros(1, dtype=torch.int32, device="cuda")
    lens = torch.ones(1, dtype=torch.int32, device="cuda")
    for p in positions:
        bound = next((b for b in bounds if b >= p + 60), bounds[-1])

        def reset(p: int = p) -> None:
            pos.fill_(p - 1)
            lens.fill_(p)

        def step(bound: int = bound) -> None:
            model.decode_greedy(tok0, pos, lens, cache, bound)

        def layers_only(bound: int = bound) -> None:
            model._decode_layers(tok0, pos, lens, cache, bound)

        floor = (weight_bytes + kv_token * p) / (gbps * 1e9) * 1e6
        row: dict[str, Any] = {"floor_us": floor}
        for name, ops in (("engine", base), ("persistent", fast), ("engine_again", base)):
            model.ops = ops
            b2b: list[float] = []
            graph_us(step, 20, reset, b2b)
            row[name] = {"us": b2b[0], "pct": 100 * floor / b2b[0]}
        model.ops = fast
        layers_us = graph_us(layers_only, 20, reset)
        row["persistent_layers_us"] = layers_us
        out["steps"][str(p)] = row
        cells = [
            f"{k} {v['us']:.1f} us ({v['pct']:.1f}%)" for k, v in row.items() if isinstance(v, dict)
        ]
        print(f"position {p}: {', '.join(cells)}; layers alone {layers_us:.1f} us", flush=True)

    out["timeline"] = {}
    for p in [int(x) for x in args.timeline.split(",") if x]:
        out["timeline"][str(p)] = timeline(model, fast, cache, tok0, p, bounds)

    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\n{'position':>9} {'engine us':>10} {'persistent us':>14} {'ratio':>6}")
    for p, row in out["steps"].items():
        e, q = row["engine"]["us"], row["persistent"]["us"]
        print(f"{p:>9} {e:>10.1f} {q:>14.1f} {e / q:>6.2f}")
    return 0


def timeline(
    model: Any, ops: Any, cache: Any, tok: torch.Tensor, p: int, bounds: list[int]
) -> dict:
    """One stamped step at position p: per stage of the middle layer, the median and the latest
    CTA, us from the first CTA's start; and the mean us a layer."""
    bound = next((b for b in bounds if b >= p + 60), bounds[-1])
    model.ops = ops
    layers = model._persistent_layers(cache, bound)
    L = model.cfg.num_hidden_layers
    layers.trace = torch.zeros(layers.ctas * L * 32, dtype=torch.int64, device="cuda")
    pos = torch.tensor([p - 1], device="cuda", dtype=torch.int32)
    for _ in range(3):
        layers.trace.zero_()
        model._decode_layers(tok, pos, pos + 1, cache, bound)
    torch.cuda.synchronize()
    tr = layers.trace.view(layers.ctas, L, 32).tolist()
    layers.trace = None
    t0 = min(cta[0][14] for cta in tr if cta[0][14] > 0)
    mid = L // 2
    stages = {}
    for slot, name in STAMPS.items():
        vals = sorted((cta[mid][slot] - t0) / 1e3 for cta in tr if cta[mid][slot] > 0)
        if vals:
            stages[name] = (statistics.median(vals), vals[-1])
    ends = [max(cta[layer][9] for cta in tr) for layer in range(L)]
    per_layer = (ends[-1] - ends[0]) / 1e3 / (L - 1)
    order = sorted(stages.items(), key=lambda kv: kv[1][0])
    cells = [f"{k} {a:.1f}/{b:.1f}" for k, (a, b) in order]
    print(f"timeline at position {p}, layer {mid} (median/latest us): {', '.join(cells)}; "
          f"{per_layer:.2f} us a layer", flush=True)  # fmt: skip
    return {"layer": mid, "stages": stages, "us_per_layer": per_layer}


if __name__ == "__main__":
    sys.exit(main())
