"""The quantized decode kernels against the bf16 ones, projection by projection, L2-cold.

    python -m evokernel.bench.quant_kernels [--shapes qwen3-0.6b,qwen3-8b] [--rows 1]
        [--formats bf16,fp8,int8,int8-g-1,int4,int4-asym] [--variants default,tile16k]
        [--reps 30] [--out quant_kernels.json]

For each model shape and projection (qkv: norm + GEMV; o_proj and down: GEMV + residual;
gate_up: norm + gate/up GEMV + SiLU-mul; head: final norm + lm_head + greedy argmax), each
weight format and each launch variant (`DecodeTuning` overrides), the fused op runs as the
engine runs it: a CUDA graph of `copies` calls, each on its own copy of the weights (copies
enough that one replay reads >= 512 MB, so L2 never holds a weight), with programmatic
dependent launch where the GPU has it. The graph is replayed `reps` times, each timed with
CUDA events; the median replay over `copies` is the time per call (us). Reported beside it:
the bytes one call reads (packed weights, scales, zero points), the achieved GB/s, the % of
the copy bandwidth floor (bytes / copy GB/s, measured in the same process), and the speedup
over the bf16 kernel of the same projection in the same run.

Formats: bf16 (the dense kernels, ops/decode.py), fp8 (128x128 blocks, float32 scales),
int8 / int4 (GPTQ-style group 128, float16 scales, symmetric), int8-g-1 / int4-g-1 (one
scale per row), int4-asym (group 128 with uint8 zero points: AWQ and asymmetric GPTQ),
int4-act (group 128, act-order: the activations gathered through a permutation). The
weights are random (values do not change the time of these kernels). Prints a table per
shape and writes JSON (--out). Needs CUDA.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# (hidden, q width, kv width, intermediate, vocab) of the public configs
SHAPES: dict[str, tuple[int, int, int, int, int]] = {
    "qwen3-0.6b": (1024, 2048, 1024, 3072, 151936),
    "qwen3-4b": (2560, 4096, 1024, 9728, 151936),
    "qwen3-8b": (4096, 4096, 1024, 12288, 151936),
}
PROJECTIONS = ("qkv", "o_proj", "gate_up", "down", "head")
FORMATS = ("bf16", "fp8", "int8", "int8-g-1", "int4", "int4-g-1", "int4-asym", "int4-act")
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "tile16k": {"tile_bytes": 16 * 1024},
    "tile64k": {"tile_bytes": 64 * 1024},
    "warps4": {"gemv_warps": 4},
    "warps8": {"gemv_warps": 8},
    "no-pdl": {"pdl": False},
    # one dequantisation for every op instead of ops/quant.py's CHOICES (its DEQUANT; bf16
    # does not run them)
    "convert": {"dequant": "convert"},
    "magic": {"dequant": "magic"},
    "early": {"dequant": "early"},
    "interleave": {"dequant": "interleave"},
    # the CUDA 4-bit kernel (ops/quant_cuda.py; other formats: their Triton fallback), with
    # its default launch or another CTA size / pipeline depth (the head: at most 8 warps)
    "cuda": {"dequant": "cuda"},
    "cuda-w4": {"dequant": "cuda", "gemv_warps": 4},
    "cuda-w8": {"dequant": "cuda", "gemv_warps": 8},
    "cuda-w16": {"dequant": "cuda", "gemv_warps": 16},
    "cuda-pipe2": {"dequant": "cuda", "cuda_pipe": 2},
}
COLD_BYTES = 512 << 20
EPS = 1e-6


def projection_shape(shape: str, proj: str) -> tuple[int, int]:
    """[rows the op's weight has, K]."""
    H, q, kv, inter, V = SHAPES[shape]
    return {
        "qkv": (q + 2 * kv, H),
        "o_proj": (H, q),
        "gate_up": (2 * inter, H),
        "down": (H, inter),
        "head": (V, H),
    }[proj]


def make_weight(fmt: str, N: int, K: int, dev: str = "cuda") -> Any:
    """One random weight [N, K] in `fmt` on `dev`."""
    from evokernel.model.quant.packed import INT_CLASSES, Fp8Weight, cdiv

    if fmt == "bf16":
        dt = torch.bfloat16 if dev == "cuda" else torch.float32
        return torch.randn(N, K, device=dev, dtype=dt) * K**-0.5
    if fmt == "fp8":
        w = (torch.randn(N, K, device=dev) * 32).to(torch.float8_e4m3fn)
        scale = torch.rand(cdiv(N, 128), cdiv(K, 128), device=dev) / (32 * K**0.5)
        return Fp8Weight(w, scale, 128, 128)
    bits = 4 if fmt.startswith("int4") else 8
    gs = K if fmt.endswith("g-1") else 128
    per = 32 // bits
    G = cdiv(K, gs)
    words = torch.randint(-(2**31), 2**31 - 1, (N, cdiv(K, per)), device=dev, dtype=torch.int32)
    scales = (torch.rand(N, G, device=dev) / ((1 << bits) * K**0.5)).half()
    zeros = None
    if fmt.endswith("asym"):
        zeros = torch.randint(0, 1 << bits, (N, G), device=dev, dtype=torch.uint8)
    perm = None
    if fmt.endswith("act"):  # act-order: the activations gathered through a permutation
        perm = torch.randperm(K, device=dev).to(torch.int32)
    return INT_CLASSES[bits](words, scales, zeros, perm, K, gs, 0)


def weight_bytes(w: Any) -> int:
    from evokernel.model.weights import weight_nbytes

    return weight_nbytes(w)


def make_op(
    proj: str, fmt: str, tuning: Any, rows: int, N: int, K: int, dev: str = "cuda"
) -> Callable:
    """The op to time for one weight: f(weight) -> None, with its inputs bound."""
    from evokernel.ops import decode, quant

    mod: Any = decode if fmt == "bf16" else quant
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    x = torch.randn(rows, K, device=dev, dtype=dt)
    norm_w = torch.ones(K, device=dev, dtype=dt)
    if proj == "qkv":
        return lambda w: mod.norm_linear(x, norm_w, w, EPS, tuning=tuning)
    if proj in ("o_proj", "down"):
        res = torch.randn(rows, N, device=dev, dtype=dt)
        return lambda w: mod.linear_residual(x, w, res, tuning=tuning)
    if proj == "gate_up":
        return lambda w: mod.norm_gate_up_silu(x, norm_w, w, EPS, tuning=tuning)
    tokens = torch.zeros(rows, dtype=torch.int64, device=dev)
    pos = torch.zeros(rows, dtype=torch.int32, device=dev)
    lens = torch.ones(rows, dtype=torch.int32, device=dev)
    # the engine's greedy head: it sends a packed head to the format's launcher itself
    return lambda w: decode.greedy_head(x, norm_w, w, EPS, tokens, pos, lens, tuning=tuning)


def _replace(tuning: Any, **changes: Any) -> Any:
    """A copy of a `DecodeTuning` (a dataclass or a NamedTuple) with fields changed."""
    if hasattr(tuning, "_replace"):
        return tuning._replace(**changes)
    return dataclasses.replace(tuning, **changes)


def measure(
    shape: str, proj: str, fmt: str, variant: str, rows: int, reps: int, gbps: float
) -> dict[str, Any]:
    from evokernel.ops import quant, quant_cuda
    from evokernel.ops.registry import pdl_supported

    overrides = dict(VARIANTS[variant])
    pdl = overrides.pop("pdl", pdl_supported())
    dequant = overrides.pop("dequant", quant.DEQUANT)
    launch = quant_cuda.DEFAULT_LAUNCH
    saved, quant.DEQUANT = quant.DEQUANT, dequant
    quant_cuda.DEFAULT_LAUNCH = launch._replace(pipe=overrides.pop("cuda_pipe", launch.pipe))
    try:
        return _measure(shape, proj, fmt, variant, rows, reps, gbps, pdl, overrides)
    finally:
        quant.DEQUANT = saved
        quant_cuda.DEFAULT_LAUNCH = launch


def _measure(
    shape: str, proj: str, fmt: str, variant: str, rows: int, reps: int, gbps: float,
    pdl: bool, overrides: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    from evokernel.bench.decode_stages import graph_us
    from evokernel.ops.decode import DEFAULT

    N, K = projection_shape(shape, proj)
    tuning = _replace(DEFAULT, pdl=pdl, **overrides)
    first = make_weight(fmt, N, K)
    nbytes = weight_bytes(first)
    copies = max(2, math.ceil(COLD_BYTES / nbytes))
    weights = [first] + [make_weight(fmt, N, K) for _ in range(copies - 1)]
    op = make_op(proj, fmt, tuning, rows, N, K)

    def all_copies() -> None:
        for w in weights:
            op(w)

    us = graph_us(all_copies, reps) / copies
    floor = nbytes / (gbps * 1e9) * 1e6
    return {
        "shape": shape, "projection": proj, "format": fmt, "variant": variant, "rows": rows,
        "N": N, "K": K, "bytes": nbytes, "copies": copies, "us": us,
        "gbps": nbytes / (us * 1e-6) / 1e9, "floor_us": floor, "pct_floor": 100 * floor / us,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evokernel.bench.quant_kernels")
    p.add_argument("--shapes", default="qwen3-0.6b,qwen3-8b")
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--projections", default=",".join(PROJECTIONS))
    p.add_argument("--variants", default="default")
    p.add_argument("--rows", default="1")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--out", default="quant_kernels.json")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    from evokernel import device as devices

    devices.prepare("cuda")
    from evokernel.bench.decode_stages import copy_gbps

    gbps = copy_gbps()
    name = torch.cuda.get_device_name()
    print(f"{name}: copy bandwidth {gbps:.0f} GB/s", flush=True)
    results: list[dict[str, Any]] = []
    doc = {"gpu": name, "copy_gbps": gbps, "results": results}
    for shape in args.shapes.split(","):
        for rows in (int(r) for r in args.rows.split(",")):
            print(f"\n{shape}, {rows} row(s): us per call (x bf16, % of floor)", flush=True)
            for proj in args.projections.split(","):
                base = None
                cells = []
                for fmt in args.formats.split(","):
                    best = None
                    for variant in args.variants.split(","):
                        if fmt == "bf16" and variant not in ("default", "no-pdl", "warps4"):
                            continue
                        try:
                            r = measure(shape, proj, fmt, variant, rows, args.reps, gbps)
                        except Exception as err:  # one failed cell is a row with its error
                            r = {"shape": shape, "projection": proj, "format": fmt,
                                 "variant": variant, "rows": rows,
                                 "error": repr(err)[:300]}  # fmt: skip
                        torch.cuda.empty_cache()
                        results.append(r)
                        if "us" in r and (best is None or r["us"] < best["us"]):
                            best = r
                    if fmt == "bf16" and best is not None:
                        base = best["us"]
                    if best is not None:
                        speed = f"x{base / best['us']:.2f}" if base else ""
                        cells.append(
                            f"{fmt} {best['us']:.2f} ({speed} {best['pct_floor']:.0f}%"
                            f"{', ' + best['variant'] if best['variant'] != 'default' else ''})"
                        )
                print(f"  {proj:8s} " + " | ".join(cells), flush=True)
                Path(args.out).write_text(json.dumps(doc, indent=1))
    speedups = _speedups(results)
    doc["best_speedup_vs_bf16"] = speedups
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"\nwrote {args.out}")
    return 0


def _speedups(results: list[dict[str, Any]]) -> dict[str, float]:
    """shape/rows/projection/format -> bf16 us over the format's best us."""
    best: dict[tuple, float] = {}
    for r in results:
        if "us" not in r:
            continue
        key = (r["shape"], r["rows"], r["projection"], r["format"])
        best[key] = min(best.get(key, math.inf), r["us"])
    out = {}
    for (shape, rows, proj, fmt), us in best.items():
        base = best.get((shape, rows, proj, "bf16"))
        if base and fmt != "bf16":
            out[f"{shape}/{rows}/{proj}/{fmt}"] = round(base / us, 3)
    return out


if __name__ == "__main__":
    sys.exit(main())
