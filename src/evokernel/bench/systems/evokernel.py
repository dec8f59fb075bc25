"""Our engine in the decode benchmark, through its public API only.

    model = load_engine(dir, device, dtype, ops, kernels=pack)   # default: Triton on CUDA,
                                                          # torch on CPU; pack: --kernels
    cache = model.new_cache(1, cache_len)                 # right-sized per position
    runner = DecodeRunner(model, cache, use_graph=cuda, greedy=True)   # before prefill
    first = sample(model.prefill(ids, lengths, cache))    # TTFT
    runner.start(first, [position]); runner.step() ...    # one graph replay per step

as `engine/generate.py` uses them. Keep this module thin: the engine's internals change
behind that API.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from evokernel.bench.systems.base import inference, right_sized
from evokernel.engine.decoder import DecoderModel
from evokernel.engine.graph import DecodeRunner
from evokernel.engine.loading import load_engine
from evokernel.ops.sampling import GREEDY


class EvokernelSystem:
    name = "evokernel"
    host_timed = False

    def __init__(
        self,
        model_dir: str | Path,
        device: str,
        dtype: torch.dtype,
        ops: str | None = None,
        kernels: str | Path | None = None,
    ) -> None:
        # Triton on the CPU runs under its (slow) interpreter: torch ops there by default.
        self.ops = ops or ("triton" if device == "cuda" else "torch")
        self.kernels = kernels
        self.name = "evokernel" if kernels is None else "evokernel_pack"
        self.model: DecoderModel | None = load_engine(
            model_dir, device, dtype, self.ops, kernels=kernels
        )
        self.graph = device == "cuda"

    def open(self, prompt: list[int], need: int) -> _Session:
        assert self.model is not None, "system closed"
        return _Session(self.model, prompt, right_sized(need), self.graph)

    def context(self) -> contextlib.AbstractContextManager[Any]:
        return inference()

    def setup(self) -> dict[str, Any]:
        return {
            "ops": self.ops,
            "kernels": str(self.kernels) if self.kernels is not None else None,
            "op_origin": dict(self.model.ops.origin) if self.model is not None else {},
            "cuda_graph": self.graph,
            "cache": "static, right-sized",
        }

    def close(self) -> None:
        self.model = None


class _Session:
    def __init__(self, model: DecoderModel, prompt: list[int], cache_len: int, graph: bool) -> None:
        dev = model.device
        self.model = model
        self.cache_len: int | None = cache_len
        self.cache = model.new_cache(1, cache_len)
        self.runner = DecodeRunner(model, self.cache, use_graph=graph, greedy=True)
        self.ids = torch.tensor([prompt], device=dev)
        self.lengths = torch.tensor([len(prompt)], device=dev)
        self.position = torch.tensor([len(prompt)], device=dev, dtype=torch.int32)
        self.longest = len(prompt) + 1  # the first decode step's seq_len, known on the host
        self.first = torch.zeros(1, dtype=torch.int64, device=dev)

    def prefill(self) -> None:
        logits = self.model.prefill(self.ids, self.lengths, self.cache)
        self.first = self.model.ops.sample(logits, GREEDY, None)

    def rewind(self) -> None:
        self.runner.start(self.first, self.position, self.longest)

    def step(self) -> None:
        self.runner.step()

    def close(self) -> None:
        del self.runner, self.cache
