"""What admitting a kernel pack costs on a GPU (engine/packs/use.py: trust, static check, import and
the load-time self-check), for a pack whose every context bucket runs the decode_layer task's
seed program (Triton) at a checkpoint's shape (a random `qwen3-0.6b` unless --model is given).

Times `open_pack` for an engine of context 160 (one bucket: a short generate), 4096 (5
buckets) and the model's every bucket (9 up to 40960 for Qwen3-0.6B), each first in this
process (Triton compiles the program's kernels, which an engine's warm-up would compile too)
and again (warm), then runs `evokernel generate --kernels` once for the whole picture. The
pack is signed with a key in a temporary directory, removed at the end with everything else.
Prints a table and writes $OUT/pack_selfcheck.json when OUT is set.

    PYTHONPATH=src python3 scripts/gpu/pack_selfcheck_cost.py [--model DIR] [--device cuda|cpu]

(--device cpu runs the same under Triton's interpreter in float32: a check of the script on a
small model, not a cost figure.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="checkpoint (default: random qwen3-0.6b)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --device cpu to check the script)", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="pack-selfcheck-"))
    try:
        return _measure(args.model, device, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _measure(model_dir: Path | None, device: str, scratch: Path) -> int:
    os.environ["EVOKERNEL_PACK_KEY"] = str(scratch / "pack-key")
    from evokernel import device as devices

    devices.prepare(device)
    dtype = devices.default_dtype(device)
    from evokernel.cli import main as cli
    from evokernel.engine.graph import context_buckets
    from evokernel.engine.packs.format import (
        Pack,
        PackEntry,
        TaskTable,
        describe_device,
        shape_key,
        software_versions,
    )
    from evokernel.engine.packs.use import PackPolicy, open_pack
    from evokernel.model.config import ModelConfig
    from evokernel.model.random import write_random_checkpoint
    from evokernel.ops.registry import OpSet
    from evokernel.tasks.decode_layer.task import SEED, name_for
    from evokernel.tune.write import save_pack

    model = model_dir or write_random_checkpoint(scratch / "model", "qwen3-0.6b", seed=0)
    cfg = ModelConfig.from_dir(model)
    task = name_for(cfg)
    bounds = context_buckets(cfg.max_position_embeddings)
    entries = tuple(PackEntry(b, f"b1_ctx{b}", b, "programs/seed.py") for b in bounds)
    pack_dir = scratch / "pack"
    save_pack(
        Pack(
            path=pack_dir,
            created="",
            evokernel="",
            device=describe_device(device),
            software=software_versions(),
            model=shape_key(cfg, dtype),
            tasks={task: TaskTable(task, "decode_layer", entries)},
        ),
        {"programs/seed.py": SEED.read_text()},
    )
    layer = OpSet.named("triton" if device == "cuda" else "torch").decode_layer
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None
    rows = []
    for max_len in (160, 4096, None):
        for when in ("first", "again"):
            sync()
            start = time.perf_counter()
            open_pack(pack_dir, cfg, device, dtype, layer, max_len=max_len,
                      policy=PackPolicy(), notes=lambda line: None)  # fmt: skip
            sync()
            seconds = time.perf_counter() - start
            buckets = sum(1 for b in [0, *bounds][:-1] if max_len is None or b < max_len)
            rows.append({"max_len": max_len, "buckets": buckets, "when": when, "s": seconds})
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU (interpreter, no figure)"
    print(f"pack self-check cost: {where}, {task}, {str(dtype).removeprefix('torch.')}")
    print(f"{'engine context':>15}{'buckets':>9}{'when':>7}{'seconds':>9}")
    for r in rows:
        context = "every" if r["max_len"] is None else str(r["max_len"])
        print(f"{context:>15}{r['buckets']:>9}{r['when']:>7}{r['s']:>9.3f}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "pack_selfcheck.json").write_text(json.dumps(rows, indent=1))
    print("generate --kernels (the self-check line is on stderr):", flush=True)
    return cli(["generate", "--model", str(model), "--prompt-ids", "1,2,3", "--max-new-tokens",
                "32", "--device", device, "--kernels", str(pack_dir)])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
