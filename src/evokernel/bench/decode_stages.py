"""Where a decode step's time goes: each stage alone, and the whole step, against byte floors.

    python -m evokernel.bench.decode_stages --model DIR [--positions 1,4096] [--out F.json]
        [--variants default,no-pdl,tile16k,...] [--stage-position 1024] [--cache 128]
        [--batch 8]

For each launch variant of the fused decode kernels (a `DecodeTuning`, with or without
programmatic dependent launch) on the checkpoint's real weights (bf16, CUDA):

  * every stage of the step alone, as a CUDA graph of that stage over all L layers (distinct
    weights per layer, so L2 is cold as in a real step), replayed: qkv (norm + qkv GEMV),
    attention (q/k norm, RoPE, cache append, split-KV attention at --stage-position), o_proj
    (+ residual), gate_up (norm + gate/up GEMV + SiLU-mul), down (+ residual), head (final
    norm + lm_head + argmax); per layer in microseconds against the stage's byte floor (its
    weight / KV bytes over the copy bandwidth measured in this run); the four GEMV stages
    also L2-hot (`hot_us`: one layer's weights L times, so they come from L2, not HBM);
  * the whole greedy step as the engine runs it (one graph) at each position: microseconds,
    tok/s, % of the step's floor ((weights + KV bytes at that position) / copy bandwidth), and
    the same step replayed back to back (`b2b_us`: 20 replays between two events, so the
    gaps between graph launches count, as in a decode loop). The step at position p runs at
    the smallest context bucket >= p + reps + 30 (so the replays stay inside it), which is
    not always the engine's bucket for p: a position within that margin below a bucket's top
    (1,000 with the default reps: bound 2,048, its rows past 1,060 empty) runs a bound the
    engine would not use there. Choose positions inside a bucket, or a --cache that makes the
    bound the cache's length.

With --batch B every stage and step runs B rows (B sequences, each at the position), the way
a batched step does: weight floors are unchanged, KV floors are B times the position's.

Replays are timed one by one with CUDA events after a warm-up; medians are reported. The KV
cache holds random values (never time on zeros). Prints a table; writes JSON (--out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from evokernel.model.weights import weight_nbytes


def _triton_short(overrides: dict[str, Any]) -> dict[str, Any]:
    """A variant of the Triton attention at bounds <= 256: the CUDA one-pass kernel off."""
    return {**overrides, "cuda_direct": False}


def _int4_triton() -> tuple[tuple[str, str, int, str, int, int], ...]:
    """`DecodeTuning.quant` entries that run 4-bit weights on the Triton table
    (`quant.triton_rule`) at Qwen3-0.6B's, -4B's and -8B's K, the head included."""
    from evokernel.ops import quant

    ks = {
        "norm_linear": (1024, 2560, 4096),
        "gate_up": (1024, 2560, 4096),
        "linear_residual": (2048, 3072, 4096, 9728, 12288),
        "head": (1024, 2560, 4096),
    }
    return tuple(
        ("int4", op, k, *quant.triton_rule("int4", op, k), 0) for op, kk in ks.items() for k in kk
    )


VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "no-pdl": {"pdl": False},
    "tile16k": {"tile_bytes": 16 * 1024},
    "tile64k": {"tile_bytes": 64 * 1024},
    "warps4": {"gemv_warps": 4},
    "attn-n32": {"attn_block_n": 32},
    "attn-n128": {"attn_block_n": 128, "attn_warps": 8},
    # The first bucket (bounds <= 256): other tiles and warps, one-tile chunks throughout.
    "short-n32": _triton_short({"short_block_n": 32, "direct_max": 32, "min_chunk": 32}),
    "short-n64": _triton_short({"short_block_n": 0, "direct_max": 64, "min_chunk": 64}),
    "short-w1": _triton_short({"short_warps": 1}),
    # One program per kv head up to 256 positions in 64-row tiles (the engine until 2026-11-23).
    "direct256": _triton_short({"short_block_n": 0, "direct_max": 256, "min_chunk": 64}),
    # One program per kv head up to 256 positions in 16- or 32-row tiles.
    "direct256-n16": _triton_short({"short_block_n": 16, "direct_max": 256}),
    "direct256-n32": _triton_short({"short_block_n": 32, "direct_max": 256}),
    "short-w2": _triton_short({"short_warps": 2}),
    # The first bucket's attention products on the CUDA cores (no 16-row padding).
    "short-cuda": _triton_short({"short_mma": False}),
    "short-cuda-w1": _triton_short({"short_mma": False, "short_warps": 1}),
    "short-cuda-1k": _triton_short({"short_mma": False, "short_max": 1024}),
    "short-cuda-4k": _triton_short({"short_mma": False, "short_max": 4096}),
    "combine-w2": _triton_short({"combine_warps": 2}),
    "combine-w4": _triton_short({"combine_warps": 4}),
    "chunk64": _triton_short({"min_chunk": 64}),
    "chunk128": _triton_short({"min_chunk": 128}),
    "attn-4sm": _triton_short({"attn_programs_per_sm": 4}),
    # The split merged inside the attention launch by its last program (tickets).
    "tickets": _triton_short({"ticket_combine": True}),
    # The first buckets' fused attention in Triton (split + combine), not the CUDA kernel.
    "triton-short": _triton_short({}),
    # The tensor-core rows kernel (batches of >= rows_min rows; defaults: the weights as the
    # MMA's row operand, 2 warps, row tiles up to 64, every norm a launch of its own first):
    # its weight slab per program (smaller slabs split K over more programs), warps, row
    # tile, operand order and norms.
    "rows16k": {"rows_tile_bytes": 16 * 1024},
    "rows32k": {"rows_tile_bytes": 32 * 1024},
    "rows128k": {"rows_tile_bytes": 128 * 1024},
    "rows-k512": {"rows_block_k": 512},
    "rows-w1": {"rows_warps": 1},
    "rows-w4": {"rows_warps": 4},
    "rows-m16": {"rows_block_m": 16},
    "rows-noswap": {"rows_swap": False, "rows_warps": 4},
    "rows-pre-head": {"rows_prenorm": 1},
    "rows-pre0": {"rows_prenorm": 0},
    # the rows kernel's launch before 2026-11-26's batched-decode work (one wave of BLOCK_N
    # = 16 programs with the norm fused in each, 4 warps, 16-row tiles)
    "rows-fused": {"rows_swap": False, "rows_prenorm": 0, "rows_warps": 4, "rows_block_m": 16},
    # Whole K a program (kernels/rows.py `rows_whole_k_kernel`) up to K 1,024 (qkv, gate_up,
    # head) or 2,048 (and o_proj), up to 8 or 16 rows: no cross-program merge; the norms
    # launched apart (or in each program: `-fused`); parts of 128 along K (or 256).
    "whole-k": {"rows_whole_k": 2048},
    "whole-k1024": {"rows_whole_k": 1024},
    "whole-k-m16": {"rows_whole_k": 2048, "rows_whole_k_rows": 16},
    "whole-k-fused": {"rows_whole_k": 2048, "rows_prenorm": 0},
    "whole-k-p256": {"rows_whole_k": 2048, "rows_part_k": 256},
    "whole-k-n8": {"rows_whole_k_n": 8},
    "whole-k-n32": {"rows_whole_k_n": 32},
    "whole-k-4k": {"rows_whole_k": 4096},
    "whole-k-4k-n8": {"rows_whole_k": 4096, "rows_whole_k_n": 8},
    # The streaming rows kernel (kernels/rows.py `rows_stream_kernel`: where the whole-K
    # kernel does not apply, up to 64 rows): off (the split kernel), everywhere (whole K
    # off), only past K 1,024, the norm in each program, less or no L2 prefetch before the
    # PDL wait, other columns a program, K chunks, stages, warps and program targets.
    "no-stream": {"rows_stream": False},
    "stream-all": {"rows_whole_k": 0},
    "stream-k1024": {"rows_whole_k": 1024},
    "stream-pre0": {"rows_prenorm": 0},
    "stream-pf0": {"stream_prefetch": 0},
    "stream-pf8": {"stream_prefetch": 8},
    "stream-n32": {"stream_block_n": 32},
    "stream-n128": {"stream_block_n": 128},
    "stream-k64": {"stream_block_k": 64},
    "stream-k256": {"stream_block_k": 256},
    "stream-n16k256": {"stream_block_n": 16, "stream_block_k": 256},
    "stream-n16k512": {"stream_block_n": 16, "stream_block_k": 512, "stream_programs": 64},
    "stream-n32k256": {"stream_block_n": 32, "stream_block_k": 256},
    "stream-s3": {"stream_stages": 3},
    "stream-s6": {"stream_stages": 6},
    "stream-w8": {"stream_warps": 8},
    "stream-p264": {"stream_programs": 264},
    # The deep ops (o_proj, down) in the streaming kernel's general blocks at every row count.
    "stream-shallow": {"stream_deep_n": 0, "stream_deep_k": 0},
    # The CUDA one-pass attention beyond 256 positions (a cluster of at least 4 CTAs per kv
    # head; here 2 or 8) or only up to 256 (the engine until 2026-11-27), or up to 1,024.
    "cuda-256": {"cuda_direct_max": 256},
    "cuda-1k": {"cuda_direct_max": 1024},
    "cuda-cl2": {"cuda_cluster": 2},
    "cuda-cl8": {"cuda_cluster": 8},
    # Two tiles a warp (the second staged in shared memory; by default only where the one-tile
    # clusters exceed half the SMs): never, and also from bound 1,025, 2,049 (to 4,096) and 257
    # (a single CTA of 16 warps up to 512 rows) at any batch.
    "tiles-off": {"cuda_tiles": False},
    "tiles-1k": {"cuda_tiles_from": 1025},
    "tiles-2k": {"cuda_direct_max": 4096, "cuda_tiles_from": 2049},
    "tiles-257": {"cuda_tiles_from": 257},
    # The CUDA C++ tensor-core rows kernel (ops/rows_cuda.py; by default o_proj, down and qkv
    # from 3 to 16 rows, gate_up from 9): off (the Triton rows kernels everywhere), for every
    # projection and the head from 2 rows, from 1 (batch 1 too), without the head, and so with
    # 4 warps a CTA.
    "triton-rows": {"cuda_rows_min": 0},
    "cuda-rows": {
        "cuda_rows_min": 2,
        "cuda_rows_norm": 2,
        "cuda_rows_gate_up": 2,
        "cuda_rows_head": True,
    },
    "cuda-rows-1": {
        "cuda_rows_min": 1,
        "cuda_rows_norm": 1,
        "cuda_rows_gate_up": 1,
        "cuda_rows_head": True,
    },
    "cuda-rows-th": {"cuda_rows_min": 2, "cuda_rows_norm": 2, "cuda_rows_gate_up": 2},
    "cuda-rows-w4": {
        "cuda_rows_min": 2,
        "cuda_rows_norm": 2,
        "cuda_rows_gate_up": 2,
        "cuda_rows_warps": 4,
    },
    # the normed ops' own row thresholds on the CUDA kernel: both off (the residual ops only),
    # gate_up from 3 rows as qkv, qkv from 9 as gate_up
    "cuda-residual": {"cuda_rows_norm": 0, "cuda_rows_gate_up": 0},
    "cuda-gate-up-3": {"cuda_rows_gate_up": 3},
    "cuda-qkv-9": {"cuda_rows_norm": 9},
    # Batches below rows_min run the one-row CUDA-core kernels.
    "one-row": {"rows_min": 1 << 30},
    # 4-bit checkpoints on the Triton kernels (the table before the CUDA kernel of
    # ops/quant_cuda.py), at Qwen3-0.6B's, -4B's and -8B's K, the head included.
    "int4-triton": {"quant": _int4_triton()},
    # The plain PyTorch ops (cuBLAS GEMMs, SDPA, eager norms): a yardstick, not the engine.
    "torch": {"ops": "torch"},
}
STAGES = ("qkv", "attention", "o_proj", "gate_up", "down", "head")


def copy_gbps(nbytes: int = 2 << 30) -> float:
    """Read + write bytes per second of a device-to-device copy (median of 10), GB/s."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / statistics.median(times[2:]) / 1e9


def capture(fn: Callable[[], object], before: Callable[[], object] | None = None) -> Any:
    """A CUDA graph of `fn`, after two warm-up calls on a side stream (`before` runs ahead of
    each call and of the capture, outside the graph)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            if before:
                before()
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    if before:
        before()
    with torch.cuda.graph(graph):
        fn()
    return graph


def graph_us(
    fn: Callable[[], object],
    reps: int,
    before: Callable[[], object] | None = None,
    b2b: list[float] | None = None,
) -> float:
    """Median microseconds of one replay of a CUDA graph of `fn` (`before` runs, untimed,
    ahead of every replay: it resets state the graph advances). With `b2b`, also appends the
    mean microseconds per replay of 20 replays back to back."""
    graph = capture(fn, before)
    times = []
    for _ in range(reps + 3):
        if before:
            before()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    if b2b is not None:
        if before:
            before()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(20):
            graph.replay()
        b.record()
        b.synchronize()
        b2b.append(a.elapsed_time(b) * 1e3 / 20)
    return statistics.median(times[3:])


class Bench:
    def __init__(
        self,
        model_dir: str,
        positions: list[int],
        reps: int,
        stage_position: int = 1024,
        cache_len: int | None = None,
        batch: int = 1,
    ) -> None:
        from evokernel import device as devices

        devices.prepare("cuda")
        from evokernel.engine.graph import context_buckets
        from evokernel.engine.loading import load_engine

        self.reps = reps
        self.batch = batch
        self.positions = positions
        self.stage_position = stage_position
        self.model = load_engine(model_dir, "cuda", torch.bfloat16, "torch")
        cfg = self.model.cfg
        self.cfg = cfg
        need = max(*positions, stage_position) + 2 * reps + 64
        self.cache = self.model.new_cache(batch, cache_len or need)
        self.bounds = context_buckets(self.cache.max_seq_len)
        for t in (*self.cache.k, *self.cache.v):
            t.normal_()
        self.copy_gbps = copy_gbps()
        w = self.model.weights
        nb = weight_nbytes
        self.layer_bytes = {
            "qkv": sum(nb(lw.qkv_proj) + lw.input_norm.nbytes for lw in w.layers),
            "o_proj": sum(nb(lw.o_proj) for lw in w.layers),
            "gate_up": sum(nb(lw.gate_up_proj) + lw.post_attn_norm.nbytes for lw in w.layers),
            "down": sum(nb(lw.down_proj) for lw in w.layers),
            "head": nb(w.lm_head) + w.final_norm.nbytes,
        }
        self.weight_bytes = sum(self.layer_bytes.values())
        self.kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 2

    def floor_us(self, nbytes: float) -> float:
        return nbytes / (self.copy_gbps * 1e9) * 1e6

    def variant(self, name: str, overrides: dict[str, Any]) -> dict[str, Any]:
        from evokernel.ops.decode import DEFAULT
        from evokernel.ops.registry import OpSet, pdl_supported

        pdl = overrides.get("pdl", pdl_supported())
        tuning = DEFAULT._replace(**{k: v for k, v in overrides.items() if k not in ("pdl", "ops")})
        ops = OpSet.torch() if overrides.get("ops") == "torch" else OpSet.triton(pdl, tuning)
        self.model.ops = ops
        stages = self._stages(ops)
        steps = {}
        for p in self.positions:
            b2b: list[float] = []
            us = self._step_us(p, b2b)
            floor = self.floor_us(self.weight_bytes + self.kv_per_token * p * self.batch)
            steps[str(p)] = {
                "us": us,
                "tok_s": 1e6 / us,
                "floor_us": floor,
                "pct": 100 * floor / us,
                "b2b_us": b2b[0],
                "attention_us": self._attention_us(ops, p),
            }
        return {
            "name": name,
            "pdl": pdl,
            "batch": self.batch,
            "tuning": tuning._asdict(),
            "stages": stages,
            "steps": steps,
        }

    def _stages(self, ops: Any) -> dict[str, dict[str, float]]:
        cfg, w = self.cfg, self.model.weights
        L, eps, B = cfg.num_hidden_layers, cfg.rms_norm_eps, self.batch
        h = torch.randn(B, cfg.hidden_size, device="cuda", dtype=torch.bfloat16)
        qkv = torch.randn(
            B,
            (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * cfg.head_dim,
            device="cuda",
            dtype=torch.bfloat16,
        )
        attn = torch.randn(
            B, cfg.num_attention_heads * cfg.head_dim, device="cuda", dtype=torch.bfloat16
        )
        act = torch.randn(B, cfg.intermediate_size, device="cuda", dtype=torch.bfloat16)
        p = self.stage_position
        pos = torch.full((B,), p - 1, device="cuda", dtype=torch.int32)
        lens = pos + 1
        tokens = torch.zeros(B, dtype=torch.int64, device="cuda")
        bound = self.cache.max_seq_len

        def reset() -> None:
            pos.fill_(p - 1)
            lens.fill_(p)

        def stage_fns(layers: list[Any]) -> dict[str, Callable[[], object]]:
            return {
                "qkv": lambda: [
                    ops.norm_linear(h, lw.input_norm, lw.qkv_proj, eps, lw.qkv_bias)
                    for lw in layers
                ],
                "attention": lambda: self._attend(ops, qkv, pos, lens, bound, layers),
                "o_proj": lambda: [ops.linear_residual(attn, lw.o_proj, h) for lw in layers],
                "gate_up": lambda: [
                    ops.norm_gate_up_silu(h, lw.post_attn_norm, lw.gate_up_proj, eps)
                    for lw in layers
                ],
                "down": lambda: [ops.linear_residual(act, lw.down_proj, h) for lw in layers],
                "head": lambda: ops.greedy_head(h, w.final_norm, w.lm_head, eps, tokens, pos, lens),
            }

        fns = stage_fns(list(w.layers))
        # The GEMVs again with one layer's weights L times: L2-hot, what a stage costs when
        # its weights need not come from HBM.
        hot = stage_fns([w.layers[0]] * L)
        out = {}
        for stage in STAGES:
            us = graph_us(fns[stage], self.reps, reset)
            nbytes = self.layer_bytes.get(stage, self.kv_per_token * p * B)
            per = 1 if stage == "head" else L
            floor = self.floor_us(nbytes)
            out[stage] = {"us": us / per, "floor_us": floor / per, "pct": 100 * floor / us}
            if stage in ("qkv", "o_proj", "gate_up", "down"):
                out[stage]["hot_us"] = graph_us(hot[stage], self.reps, reset) / per
        out["attention"]["position"] = p
        return out

    def _attend(
        self, ops: Any, qkv: torch.Tensor, pos: torch.Tensor, lens: torch.Tensor, bound: int,
        layers: list[Any],
    ) -> list[torch.Tensor]:  # fmt: skip
        """The attention op over `layers` (layer i on cache layer i), as the step calls it."""
        m = self.model
        return [
            ops.decode_attention_qkv(
                qkv,
                lw.q_norm,
                lw.k_norm,
                m.cos,
                m.sin,
                pos,
                self.cache.k[i],
                self.cache.v[i],
                lens,
                m.scale,
                self.cfg.rms_norm_eps,
                bound,
            )
            for i, lw in enumerate(layers)
        ]

    def _attention_us(self, ops: Any, p: int) -> float:
        """Per layer: the attention stage alone at position p."""
        cfg = self.cfg
        qkv = torch.randn(
            self.batch,
            (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * cfg.head_dim,
            device="cuda",
            dtype=torch.bfloat16,
        )
        pos = torch.full((self.batch,), p - 1, device="cuda", dtype=torch.int32)
        lens = pos + 1
        bound = next(b for b in self.bounds if b >= p)

        def fn() -> object:
            return self._attend(ops, qkv, pos, lens, bound, list(self.model.weights.layers))

        return graph_us(fn, self.reps) / cfg.num_hidden_layers

    def _step_us(self, position: int, b2b: list[float]) -> float:
        m, cache = self.model, self.cache
        B = self.batch
        tokens = torch.zeros(B, dtype=torch.int64, device="cuda")
        pos = torch.zeros(B, dtype=torch.int32, device="cuda")
        lens = torch.ones(B, dtype=torch.int32, device="cuda")
        # The smallest bucket that holds the 20 back-to-back steps (the cache's length at most).
        bound = next((b for b in self.bounds if b >= position + self.reps + 30), self.bounds[-1])

        def reset() -> None:
            pos.fill_(position - 1)
            lens.fill_(position)

        return graph_us(
            lambda: m.decode_greedy(tokens, pos, lens, cache, bound), self.reps, reset, b2b
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--positions", default="1,128,1024,4096,16384,32768")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument(
        "--stage-position", type=int, default=1024, help="the attention stage's position"
    )
    parser.add_argument(
        "--cache",
        type=int,
        default=None,
        help="KV cache positions (default: what the positions need); a short cache sets the "
        "steps' bound, as `bench decode` sizes its cache per row (128 at position 1)",
    )
    parser.add_argument(
        "--batch", type=int, default=1, help="rows per step: B sequences, each at the position"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.batch < 1:
        print("error: --batch must be >= 1", file=sys.stderr)
        return 2
    positions = [int(p) for p in args.positions.split(",")]
    if args.cache is not None and args.cache < max(*positions, args.stage_position) + 21:
        print("error: --cache must hold every position (and the stage position) + 21 steps",
              file=sys.stderr)  # fmt: skip
        return 2
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        print(f"error: unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}",
              file=sys.stderr)  # fmt: skip
        return 2
    if not torch.cuda.is_available():
        print("error: decode_stages needs a CUDA GPU", file=sys.stderr)
        return 2
    bench = Bench(args.model, positions, args.reps, args.stage_position, args.cache, args.batch)
    results = []
    for name in args.variants.split(","):
        try:
            results.append(bench.variant(name, VARIANTS[name]))
        except Exception as e:  # one variant's failure (e.g. out of memory) ends only it
            print(f"{name:<10} failed: {type(e).__name__}: {e}", flush=True)
            results.append({"name": name, "error": f"{type(e).__name__}: {e}"})
            torch.cuda.empty_cache()
            continue
        r = results[-1]
        stages = " ".join(
            f"{s} {r['stages'][s]['us']:.2f}us({r['stages'][s]['pct']:.0f}%"
            + (f", hot {r['stages'][s]['hot_us']:.2f}" if "hot_us" in r["stages"][s] else "")
            + ")"
            for s in STAGES
        )
        steps = " ".join(
            f"@{p}: {v['tok_s']:.0f} tok/s {v['pct']:.1f}% (b2b {v['b2b_us']:.0f}us, "
            f"attn {v['attention_us']:.1f}us)"
            for p, v in r["steps"].items()
        )
        print(f"{name:<10} {stages}\n{'':<10} {steps}", flush=True)
    doc = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "copy_gbps": bench.copy_gbps,
        "weight_bytes": bench.weight_bytes,
        "kv_bytes_per_token": bench.kv_per_token,
        "layers": bench.cfg.num_hidden_layers,
        "batch": bench.batch,
        "variants": results,
    }
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1))
    print(json.dumps({"decode_stages": str(args.out), "copy_gbps": round(bench.copy_gbps, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
