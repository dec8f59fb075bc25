"""Print and record what the GPU check ran on: GPU, driver, clocks, library versions, and the
measured device-to-device copy bandwidth (read + write bytes), the denominator of every
roofline figure. Writes $OUT/env.json."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path


def _smi(query: str) -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def copy_bandwidth_gbs(nbytes: int = 2 << 30, reps: int = 20) -> float:
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return 2 * nbytes / times[len(times) // 2] / 1e9


def main() -> None:
    import torch
    import triton

    info: dict[str, object] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "driver": _smi("driver_version"),
        "clocks_sm_mem_mhz": _smi("clocks.sm,clocks.mem"),
        "max_clocks_sm_mem_mhz": _smi("clocks.max.sm,clocks.max.mem"),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["sm_count"] = props.multi_processor_count
        info["l2_bytes"] = getattr(props, "L2_cache_size", 0)
        info["copy_gbs"] = round(copy_bandwidth_gbs(), 1)
    for key, value in info.items():
        print(f"{key:>22}: {value}")
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "env.json").write_text(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
