"""The systems `evokernel bench decode` can run, by name, imported only when run.

    evokernel   our engine (Triton ops + CUDA graph on CUDA)           systems/evokernel.py
    evokernel_pack  the same engine with the `--kernels` pack's programs (added to the run
                whenever a pack is given, so pack and no pack are measured in one run)
    gptfast     gpt-fast-style PyTorch model, torch.compile            systems/gptfast.py
    gptfast_int8  the same with gpt-fast's int8 weight-only linears    systems/gptfast_int8.py
    hf_eager    transformers, SDPA, growing DynamicCache                systems/hf.py
    hf_compile  transformers, StaticCache + its compiled call           systems/hf.py
    vllm        vLLM's offline engine, only when importable             systems/vllm.py

`skip_reason(name, device)` says why a system cannot run here (it then has no rows and is
listed under `skipped` in the result file); `load_system` loads one (a `base.System`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from evokernel.bench.systems.base import System

SYSTEM_NAMES = (
    "evokernel", "evokernel_pack", "gptfast", "gptfast_int8", "hf_eager", "hf_compile", "vllm",
)  # fmt: skip


def skip_reason(name: str, device: str) -> str | None:
    if name == "vllm":
        from evokernel.bench.systems.vllm import unavailable

        return unavailable() if device == "cuda" else "vllm needs a CUDA GPU"
    if name.startswith("hf_"):
        import importlib.util

        if importlib.util.find_spec("transformers") is None:
            return "transformers is not installed"
    return None


def load_system(
    name: str,
    model_dir: str | Path,
    device: str,
    dtype: torch.dtype,
    max_len: int,
    engine_ops: str | None = None,
    engine_kernels: str | Path | None = None,
) -> System:
    """`max_len`: the most positions any session of this run will need; `engine_ops`: our
    engine's op set (None: its device default); `engine_kernels`: a kernel pack our engine
    runs as `evokernel_pack` (every other system, `evokernel` included, ignores it)."""
    if name in ("evokernel", "evokernel_pack"):
        from evokernel.bench.systems.evokernel import EvokernelSystem

        if name == "evokernel":
            return EvokernelSystem(model_dir, device, dtype, engine_ops)
        if engine_kernels is None:
            raise ValueError("evokernel_pack needs a kernel pack (--kernels)")
        return EvokernelSystem(model_dir, device, dtype, engine_ops, engine_kernels)
    if name == "gptfast":
        from evokernel.bench.systems.gptfast import GptFastSystem

        return GptFastSystem(model_dir, device, dtype)
    if name == "gptfast_int8":
        from evokernel.bench.systems.gptfast_int8 import GptFastInt8System

        return GptFastInt8System(model_dir, device, dtype)
    if name == "hf_eager":
        from evokernel.bench.systems.hf import HfEagerSystem

        return HfEagerSystem(model_dir, device, dtype)
    if name == "hf_compile":
        from evokernel.bench.systems.hf import HfCompileSystem

        return HfCompileSystem(model_dir, device, dtype)
    if name == "vllm":
        from evokernel.bench.systems.vllm import VllmSystem

        return VllmSystem(model_dir, device, dtype, max_len)
    raise ValueError(f"unknown system {name!r}")
