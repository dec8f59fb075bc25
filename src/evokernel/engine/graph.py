"""Decode steps for one KV cache: eager, or replayed from a captured CUDA graph.

State lives in static device buffers, so a step has fixed addresses and no host work:
  tokens    [B] int64   the tokens to feed
  positions [B] int32   where they go in the cache
  seq_lens  [B] int32   positions + 1 (what attention reads)

`step()` runs `model.decode`, then advances positions and seq_lens by one, and with
`greedy=True` also writes argmax(logits) into `tokens` (through the op set's `sample`), so a
greedy loop is nothing but replays. It returns the logits `[B, V]` float32; in graph mode
that is a static buffer the next step overwrites. Non-greedy callers sample outside and
`feed()` the tokens.

On CUDA the constructor runs the step a few times on a side stream (Triton compiles, cuBLAS
picks its kernels), captures one step when `use_graph`, then zeroes the cache: build the
runner before prefilling the cache. On CPU the step runs eagerly, with no warm-up.
"""

from __future__ import annotations

import torch

from evokernel.engine.cache import KVCache
from evokernel.engine.qwen3 import Qwen3Model
from evokernel.ops.sampling import GREEDY

WARMUP_STEPS = 3


class DecodeRunner:
    """Decode steps over `cache` (all B rows) from static buffers; see the module doc."""

    def __init__(self, model: Qwen3Model, cache: KVCache, *, use_graph: bool, greedy: bool) -> None:
        B, device = cache.batch, cache.device
        assert not use_graph or device.type == "cuda", "CUDA graphs need a CUDA cache"
        self.model = model
        self.cache = cache
        self.greedy = greedy
        self.tokens = torch.zeros(B, dtype=torch.int64, device=device)
        self.positions = torch.zeros(B, dtype=torch.int32, device=device)
        self.seq_lens = torch.ones(B, dtype=torch.int32, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self._logits: torch.Tensor | None = None
        if device.type == "cuda":
            self._warm_up(capture=use_graph)

    @property
    def uses_graph(self) -> bool:
        return self.graph is not None

    def start(self, tokens: torch.Tensor, positions: torch.Tensor) -> None:
        """Next step feeds tokens [B] at positions [B] (copied into the static buffers)."""
        self.tokens.copy_(tokens)
        self.positions.copy_(positions)
        self.seq_lens.copy_(positions)
        self.seq_lens.add_(1)

    def feed(self, tokens: torch.Tensor) -> None:
        self.tokens.copy_(tokens)

    def step(self) -> torch.Tensor:
        if self.graph is None:
            return self._body()
        self.graph.replay()
        assert self._logits is not None
        return self._logits

    def _body(self) -> torch.Tensor:
        logits = self.model.decode(self.tokens, self.positions, self.seq_lens, self.cache)
        self.positions.add_(1)
        self.seq_lens.add_(1)
        if self.greedy:
            self.tokens.copy_(self.model.ops.sample(logits, GREEDY, None))
        return logits

    def _warm_up(self, capture: bool) -> None:
        # Warm-up on a side stream, as graph capture requires.
        stream = torch.cuda.Stream(device=self.cache.device)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_STEPS):
                self._body()
        torch.cuda.current_stream().wait_stream(stream)
        if capture:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._logits = self._body()
            self.graph = graph
        # The warm-up steps wrote junk into the cache and advanced the buffers.
        self.cache.zero_()
        self.start(torch.zeros_like(self.tokens), torch.zeros_like(self.positions))
        torch.cuda.synchronize(self.cache.device)
