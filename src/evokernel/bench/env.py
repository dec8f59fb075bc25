"""What a decode benchmark ran on: the `env` object of the result file (bench_schema).

    env = collect_env("cuda")   # device, gpu, driver, cuda, versions, sm_count, clocks, copy_gbps

GPU facts come from torch and NVML (`nvml.py`); the copy bandwidth is measured here, in
the process whose figures it divides. Fields that cannot be read are None (JSON null).
"""

from __future__ import annotations

import platform
from typing import Any

import torch

from evokernel.bench.floor import copy_bandwidth_gbps
from evokernel.nvml import Nvml


def collect_env(device: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "device": device,
        "gpu": None,
        "driver": None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": _version("triton"),
        "transformers": _version("transformers"),
        "python": platform.python_version(),
        "sm_count": None,
        "clocks_mhz": None,
        "copy_gbps": None,
        "cpu": platform.processor() or platform.machine(),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = props.name
        env["sm_count"] = props.multi_processor_count
        gpu = Nvml.open(torch.cuda.current_device())
        if gpu is not None:
            env["driver"] = gpu.driver()
            env["clocks_mhz"] = gpu.clocks_mhz()
    env["copy_gbps"] = round(copy_bandwidth_gbps(device), 1)
    return env


def _version(module: str) -> str | None:
    try:
        return str(__import__(module).__version__)
    except ImportError:
        return None
