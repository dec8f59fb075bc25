"""The gpt-fast-style baseline: `gptfast_model.Transformer` with its decode step compiled.

On CUDA, `decode_one_token` is compiled as gpt-fast compiles it: `torch.compile(mode=
"reduce-overhead", fullgraph=True)` (Inductor kernels replayed from CUDA graphs). Each context
position gets a fresh, right-sized static cache whose tensors are marked

  * static addresses (`mark_static_address`): CUDA-graph replays read them in place rather
    than copying gigabytes of cache into graph-owned buffers each step; a new cache makes the
    graph re-record, which is cheap;
  * dynamic in their length (`mark_dynamic(t, 2)`): one compile serves every cache length.
    Dynamo's duck shaping is off while the step runs: it would give a cache of 128 positions
    the symbol of the (static) head_dim 128 and refuse the dynamic mark.

Prefill runs eagerly (flash SDPA, cuBLAS GEMMs), as gpt-fast does unless told to compile it.
gpt-fast also turns on Inductor's coordinate-descent tuning; we leave it off to bound compile
time. On the CPU (the smoke test) the step is compiled with the `eager` backend: Dynamo traces
the same whole graph with the same guards, but nothing is generated, so it costs seconds.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from evokernel.bench.systems.base import right_sized
from evokernel.bench.systems.gptfast_model import KVCache, Transformer, decode_one_token
from evokernel.model.loader import load_model


def compiled_graphs() -> int:
    """Graphs Dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class GptFastSystem:
    name = "gptfast"
    host_timed = False

    def __init__(self, model_dir: str | Path, device: str, dtype: torch.dtype) -> None:
        cfg, weights = load_model(model_dir, device=device, dtype=dtype)
        self.cuda = device == "cuda"
        self.model: Transformer | None = Transformer.from_weights(cfg, weights)
        if self.cuda:
            self.compile = {"backend": "inductor", "mode": "reduce-overhead", "fullgraph": True}
        else:
            self.compile = {"backend": "eager", "fullgraph": True}
        self.step_fn = torch.compile(decode_one_token, **self.compile)  # type: ignore[call-overload]
        self._graphs0 = compiled_graphs()

    def open(self, prompt: list[int], need: int) -> _Session:
        assert self.model is not None, "system closed"
        return _Session(self, prompt, right_sized(need))

    def context(self) -> contextlib.AbstractContextManager[Any]:
        from torch.fx.experimental import _config as shape_config

        stack = contextlib.ExitStack()
        stack.enter_context(torch.no_grad())  # as gpt-fast runs it (not inference_mode)
        stack.enter_context(shape_config.patch(use_duck_shape=False))
        return stack

    def setup(self) -> dict[str, Any]:
        return {
            "compile": dict(self.compile),
            "cache": "static, right-sized, length dynamic",
            "prefill": "eager (flash SDPA)",
            "graphs_compiled": compiled_graphs() - self._graphs0,
        }

    def close(self) -> None:
        self.model = None
        self.step_fn = None  # type: ignore[assignment]
        torch._dynamo.reset()


class _Session:
    def __init__(self, system: GptFastSystem, prompt: list[int], cache_len: int) -> None:
        model = system.model
        assert model is not None
        dev, dtype = model.output.device, model.output.dtype
        self.model, self.step_fn = model, system.step_fn
        self.cache_len: int | None = cache_len
        self.cache = KVCache.allocate(model.cfg, cache_len, dev, dtype)
        for t in self.cache.tensors():
            if system.cuda:
                torch._dynamo.mark_static_address(t)
            torch._dynamo.mark_dynamic(t, 2)
        self.ids = torch.tensor([prompt], device=dev)
        self.prompt_pos = torch.arange(len(prompt), device=dev)
        self.position = len(prompt)
        self.input_pos = torch.zeros(1, dtype=torch.int64, device=dev)
        self.first = torch.zeros((1, 1), dtype=torch.int64, device=dev)
        self.token = self.first

    def prefill(self) -> None:
        logits = self.model(self.ids, self.prompt_pos, self.cache)
        self.first = logits.argmax(dim=-1, keepdim=True)

    def rewind(self) -> None:
        self.input_pos.fill_(self.position)
        self.token = self.first

    def step(self) -> None:
        # The compiled step's output lives in a CUDA-graph buffer the next replay overwrites;
        # gpt-fast clones it too.
        self.token = self.step_fn(self.model, self.token, self.input_pos, self.cache).clone()
        self.input_pos.add_(1)

    def close(self) -> None:
        del self.cache
