"""`bench decode` result files for the tests, in exactly the schema the benchmark writes
(kind "evokernel-bench-decode", schema 1, checked by `evokernel.bench.results.validate`), with
GPU figures a CPU cannot produce: they follow the floor model of the real benchmark (weights
once per token plus the KV cache up to the position, over the measured copy bandwidth); a
failed system/position is a row with `error` set and null figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

WEIGHT_BYTES = 1192099840
KV_BYTES_PER_TOKEN = 114688
POSITIONS = [1, 128, 512, 1024, 4096]
EFFICIENCY = {"evokernel": 0.66, "gptfast": 0.55, "hf_eager": 0.12, "hf_compile": 0.41}


def bench_doc(
    systems: list[str],
    *,
    gpu: str | None = "NVIDIA H200",
    device: str = "cuda",
    copy_gbps: float = 4252.1,
    failed: tuple[str, int] | None = None,
    label: str | None = None,
    created: str = "2026-11-22T15:04:05Z",
) -> dict[str, Any]:
    results = []
    for system in systems:
        for position in POSITIONS:
            floor_ms = (WEIGHT_BYTES + KV_BYTES_PER_TOKEN * position) / (copy_gbps * 1e9) * 1e3
            row: dict[str, Any] = {"system": system, "position": position, "steps": 64}
            if failed == (system, position):
                row |= {k: None for k in ("tok_s", "ms_p50", "ms_p95", "ms_p99", "ms_mean")}
                row |= {"floor_ms": round(floor_ms, 4), "pct_floor": None, "ttft_ms": None}
                row |= {"power_w": None, "tok_per_j": None, "ms_host_mean": None}
                row |= {"outliers": None, "wall_s": 3.2}
                row["error"] = "torch.OutOfMemoryError: CUDA out of memory </td><b>bold</b>"
                results.append(row)
                continue
            ms = floor_ms / EFFICIENCY.get(system, 0.3)
            power = 412.0 if device == "cuda" else None
            row |= {
                "tok_s": round(1000.0 / ms, 1),
                "ms_p50": round(ms, 4),
                "ms_p95": round(ms * 1.02, 4),
                "ms_p99": round(ms * 1.06, 4),
                "ms_mean": round(ms * 1.01, 4),
                "floor_ms": round(floor_ms, 4),
                "pct_floor": round(100.0 * floor_ms / ms, 1),
                "ttft_ms": round(7.91 / EFFICIENCY.get(system, 0.3), 3),
                "power_w": power,
                "tok_per_j": round(1000.0 / ms / power, 2) if power else None,
                "error": None,
                "ms_host_mean": round(ms * 1.015, 4),
                "outliers": 1,
                "wall_s": 4.5,
            }
            results.append(row)
    return {
        "kind": "evokernel-bench-decode",
        "schema": 1,
        "created": created,
        "suite": "quick" if device == "cuda" else "smoke",
        "label": label,
        "command": "evokernel bench decode --model checkpoints/random-qwen3-0.6b --suite quick",
        "model": {
            "dir": "checkpoints/random-qwen3-0.6b",
            "name": "random-qwen3-0.6b",
            "dtype": "bfloat16",
            "config": {
                "hidden_size": 1024,
                "num_hidden_layers": 28,
                "num_attention_heads": 16,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "intermediate_size": 3072,
                "vocab_size": 151936,
                "tie_word_embeddings": True,
            },
            "weight_bytes": WEIGHT_BYTES,
            "kv_bytes_per_token": KV_BYTES_PER_TOKEN,
        },
        "env": {
            "device": device,
            "gpu": gpu if device == "cuda" else None,
            "driver": "580.159.04" if device == "cuda" else None,
            "cuda": "13.0" if device == "cuda" else None,
            "torch": "2.11.0+cu130",
            "triton": "3.6.0",
            "transformers": "5.17.0",
            "python": "3.12.3",
            "sm_count": 132 if device == "cuda" else None,
            "clocks_mhz": {"sm": 1980, "mem": 3201} if device == "cuda" else None,
            "copy_gbps": copy_gbps,
        },
        "options": {"steps": 64, "warmup": 8, "batch": 1, "positions": POSITIONS},
        "systems": systems,
        "results": results,
    }


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
