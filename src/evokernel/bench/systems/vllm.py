"""vLLM as a baseline, when it is importable (it is never a dependency of evokernel).

vLLM's offline engine, one request at a time, greedy, prefix caching off (every prefill is
real), CUDA graphs on (its default). `LLMEngine.step()` runs one scheduler iteration and
returns its outputs to the host, so it is synchronous: each step is timed by the host clock
(`host_timed`), which includes vLLM's scheduling and process hops, as a user sees them.
`prefill` and `rewind` both start a fresh request and step it until its first token (a long
prompt is prefilled in chunks). It takes a fixed share of GPU memory (`GPU_MEMORY_SHARE`), so
it runs last.
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from typing import Any

import torch

GPU_MEMORY_SHARE = 0.5
MAX_PREFILL_STEPS = 1000


def unavailable() -> str | None:
    """Why vLLM cannot run here, or None."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed"
    if not torch.cuda.is_available():
        return "vllm needs a CUDA GPU"
    return None


class VllmSystem:
    name = "vllm"
    host_timed = True

    def __init__(
        self, model_dir: str | Path, device: str, dtype: torch.dtype, max_len: int
    ) -> None:
        from vllm import LLM, SamplingParams

        self.llm: Any = LLM(
            model=str(model_dir),
            dtype=str(dtype).removeprefix("torch."),
            max_model_len=max_len,
            gpu_memory_utilization=GPU_MEMORY_SHARE,
            enable_prefix_caching=False,
            skip_tokenizer_init=True,
            seed=0,
        )
        self.params = SamplingParams(temperature=0.0, max_tokens=max_len, ignore_eos=True)
        self.max_len = max_len
        self.ids = itertools.count()

    def open(self, prompt: list[int], need: int) -> _Session:
        return _Session(self, prompt)

    def context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def setup(self) -> dict[str, Any]:
        return {
            "version": __import__("vllm").__version__,
            "max_model_len": self.max_len,
            "gpu_memory_utilization": GPU_MEMORY_SHARE,
            "prefix_caching": False,
            "timer": "host clock per LLMEngine.step()",
        }

    def close(self) -> None:
        self.llm = None


class _Session:
    cache_len: int | None = None  # vLLM's paged cache, sized by its memory share

    def __init__(self, system: VllmSystem, prompt: list[int]) -> None:
        self.system = system
        self.prompt = prompt
        self.request: str | None = None

    @property
    def engine(self) -> Any:
        return self.system.llm.llm_engine

    def _start(self) -> None:
        if self.request is not None:
            self.engine.abort_request([self.request])
            while self.engine.has_unfinished_requests():
                self.engine.step()
        self.request = f"bench-{next(self.system.ids)}"
        max_tokens = self.system.max_len - len(self.prompt)
        params = self.system.params.clone()
        params.max_tokens = max_tokens
        self.engine.add_request(self.request, {"prompt_token_ids": self.prompt}, params)
        # A long prompt is prefilled in chunks, one per step: step until the first token.
        for _ in range(MAX_PREFILL_STEPS):
            outs = self.engine.step()
            if any(o.request_id == self.request and o.outputs[0].token_ids for o in outs):
                return
        raise RuntimeError(f"vllm produced no token in {MAX_PREFILL_STEPS} steps")

    def prefill(self) -> None:
        self._start()

    def rewind(self) -> None:
        self._start()

    def step(self) -> None:
        self.engine.step()

    def close(self) -> None:
        if self.request is not None:
            self.engine.abort_request([self.request])
