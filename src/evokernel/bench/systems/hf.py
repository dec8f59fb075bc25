"""Hugging Face transformers baselines, as a user runs them (transformers >= 5).

`hf_eager`: the model as `generate()` runs it by default: SDPA attention, a `DynamicCache` that
grows by concatenation every step, eager PyTorch. `rewind` crops the cache back to the prompt.

`hf_compile`: the static-cache path `generate(cache_implementation="static")` takes: a
`StaticCache` right-sized per position, prefill eager, decode steps through
`model.get_compiled_call(CompileConfig(dynamic=True))`, transformers' own compiled call
(Inductor, mode "reduce-overhead", its other defaults). `dynamic=True` is the setting
transformers' docs show for it: the cache length stays symbolic, so one compile serves all
positions (with its default `dynamic=None`, the second cache length compiles again). Dynamo's
duck shaping is turned off while it runs, so that a cache as long as head_dim is not taken
for it (that costs a second compile). On the
CPU (smoke test) the backend is `eager`: Dynamo traces the same graph, nothing is generated.

Both read the last position's logits only (`logits_to_keep=1`): a 32k-token prefill would
otherwise write 32k x vocabulary float logits.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch
import torch.fx.experimental._config as fx_config

from evokernel.bench.systems.base import greedy_token, inference, right_sized
from evokernel.bench.systems.gptfast import compiled_graphs
from evokernel.errors import EvokernelError


def load_hf(model_dir: str | Path, device: str, dtype: torch.dtype) -> Any:
    try:
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise EvokernelError(
            "the hf baselines need transformers (pip install transformers)"
        ) from None
    hf_logging.disable_progress_bar()
    model: Any = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=dtype, attn_implementation="sdpa"
    )
    return model.to(device).eval()


class HfEagerSystem:
    name = "hf_eager"
    host_timed = False

    def __init__(self, model_dir: str | Path, device: str, dtype: torch.dtype) -> None:
        self.model: Any = load_hf(model_dir, device, dtype)

    def open(self, prompt: list[int], need: int) -> _EagerSession:
        return _EagerSession(self.model, prompt)

    def context(self) -> contextlib.AbstractContextManager[Any]:
        return inference()

    def setup(self) -> dict[str, Any]:
        return {"attn_implementation": "sdpa", "cache": "DynamicCache (grows)"}

    def close(self) -> None:
        self.model = None


class _EagerSession:
    cache_len: int | None = None

    def __init__(self, model: Any, prompt: list[int]) -> None:
        from transformers import DynamicCache

        self.model, self.cache_cls = model, DynamicCache
        self.ids = torch.tensor([prompt], device=model.device)
        self.position = len(prompt)
        self.cache: Any = None
        self.first = self.token = self.ids[:, -1:]

    def prefill(self) -> None:
        self.cache = self.cache_cls(config=self.model.config)
        out = self.model(
            input_ids=self.ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1
        )
        self.first = greedy_token(out.logits)

    def rewind(self) -> None:
        extra = self.cache.get_seq_length() - self.position
        if extra > 0:
            self.cache.crop(-extra)  # negative: drop that many positions from the end
        self.token = self.first

    def step(self) -> None:
        out = self.model(
            input_ids=self.token, past_key_values=self.cache, use_cache=True, logits_to_keep=1
        )
        self.token = greedy_token(out.logits)

    def close(self) -> None:
        self.cache = None


class HfCompileSystem:
    name = "hf_compile"
    host_timed = False

    def __init__(self, model_dir: str | Path, device: str, dtype: torch.dtype) -> None:
        from transformers import CompileConfig

        self.model: Any = load_hf(model_dir, device, dtype)
        if device == "cuda":
            config = CompileConfig(dynamic=True)
        else:
            config = CompileConfig(dynamic=True, backend="eager", mode=None)  # type: ignore[arg-type]
        self.compile = {k: v for k, v in config.to_dict().items() if k != "options"}
        self.step_fn = self.model.get_compiled_call(config)
        self._graphs0 = compiled_graphs()

    def open(self, prompt: list[int], need: int) -> _StaticSession:
        return _StaticSession(self, prompt, right_sized(need))

    def context(self) -> contextlib.AbstractContextManager[Any]:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.no_grad())  # as generate() runs it (not inference_mode)
        # `dynamic=True` gives every cache dimension a symbol, and by default equal sizes share
        # one: a 128-long cache would share head_dim's 128, be specialized with it, and compile
        # again at the next length. Distinct symbols keep the length symbolic.
        stack.enter_context(fx_config.patch(use_duck_shape=False))  # type: ignore[attr-defined]
        return stack

    def setup(self) -> dict[str, Any]:
        return {
            "compile": self.compile,
            "attn_implementation": "sdpa",
            "cache": "StaticCache, right-sized, length dynamic",
            "prefill": "eager",
            "graphs_compiled": compiled_graphs() - self._graphs0,
        }

    def close(self) -> None:
        self.model = self.step_fn = None
        torch._dynamo.reset()


class _StaticSession:
    def __init__(self, system: HfCompileSystem, prompt: list[int], cache_len: int) -> None:
        from transformers import StaticCache

        self.model, self.step_fn = system.model, system.step_fn
        self.cache_len: int | None = cache_len
        self.cache: Any = StaticCache(config=self.model.config, max_cache_len=cache_len)
        self.ids = torch.tensor([prompt], device=self.model.device)
        self.position = len(prompt)
        self.first = self.token = self.ids[:, -1:]

    def _seek(self, position: int) -> None:
        # transformers 5 keeps each static layer's write position in a device tensor
        # (`cumulative_length`), allocated with the layer at the first prefill.
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.cumulative_length.fill_(position)

    def prefill(self) -> None:
        self._seek(0)
        out = self.model(
            input_ids=self.ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1
        )
        self.first = greedy_token(out.logits)

    def rewind(self) -> None:
        self._seek(self.position)
        self.token = self.first

    def step(self) -> None:
        out = self.step_fn(
            input_ids=self.token, past_key_values=self.cache, use_cache=True, logits_to_keep=1
        )
        self.token = greedy_token(out.logits)

    def close(self) -> None:
        self.cache = None
