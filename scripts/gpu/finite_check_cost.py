"""What the loader's NaN/Inf check costs: load a checkpoint (a random `qwen3-0.6b` unless
--model is given) on the device, then time the check alone over the loaded weights, warm, and
compare it with the whole load. Prints a short table and writes $OUT/finite_check.json.

    PYTHONPATH=src python3 scripts/gpu/finite_check_cost.py [--device cuda] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from evokernel.model.checkpoint import inspect_checkpoint
from evokernel.model.finite import FiniteCheck
from evokernel.model.loader import load_model
from evokernel.model.random import write_random_checkpoint


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint directory (default: a random qwen3-0.6b)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(args.model) if args.model else write_random_checkpoint(Path(tmp) / "m")
        ckpt = inspect_checkpoint(model)
        loads = []
        for _ in range(2):  # the second load reads the files from the page cache
            _sync(args.device)
            t0 = time.perf_counter()
            _, weights = load_model(model, args.device, dtype)
            _sync(args.device)
            loads.append(time.perf_counter() - t0)
        tensors = [weights.embed_tokens, weights.final_norm, weights.lm_head]
        for layer in weights.layers:
            tensors += list(vars(layer).values())
        checks = []
        for _ in range(args.reps):
            _sync(args.device)
            t0 = time.perf_counter()
            check = FiniteCheck()
            for k, t in enumerate(tensors):
                check.add(f"t{k}", t)
            check.verify(ckpt)  # ends with the one host sync
            checks.append(time.perf_counter() - t0)
    record = {
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "dtype": dtype,
        "tensors": len(tensors),
        "weight_bytes": weights.nbytes(),
        "load_s": loads,
        "check_ms_median": statistics.median(checks) * 1e3,
        "check_ms": [c * 1e3 for c in checks],
    }
    record["check_share_of_load"] = record["check_ms_median"] / 1e3 / min(loads)
    print(
        f"finite check on {model.name}: {record['tensors']} tensors, "
        f"{record['weight_bytes'] / 1e9:.3f} GB {dtype} on {args.device} {record['gpu'] or ''}"
    )
    print(f"  load (first, second) {loads[0]:.2f} s, {loads[1]:.2f} s")
    print(
        f"  check, median of {args.reps}  {record['check_ms_median']:.2f} ms "
        f"({100 * record['check_share_of_load']:.2f}% of the faster load)"
    )
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "finite_check.json").write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
