"""Decode steps for one KV cache: eager, or replayed from CUDA graphs captured once per context
bucket and kept.

State lives in static device buffers, so a step has fixed addresses and no host work:
  tokens    [B] int64   the tokens to feed
  positions [B] int32   where they go in the cache
  seq_lens  [B] int32   positions + 1 (what attention reads)

Two kinds of step (`greedy`):
  * greedy: the step ends in `greedy_head`, which writes argmax(logits) into `tokens` and
    advances positions and seq_lens, so a greedy loop is nothing but replays;
  * sampling: the step returns the logits [B, V] float32 (in graph mode a static buffer the
    next step overwrites) and advances positions and seq_lens; the caller samples on the
    device and `feed()`s the tokens.

Buckets: attention sizes its work (how many programs split the context) by a host-side bound
on seq_lens. The runner captures one graph per bound in `context_buckets(cache length)` and per
kind, each valid for every step whose longest sequence fits the bound, and replays the
smallest that fits. It tracks the longest position on the host (`start` is told it, or reads
it once), so choosing a graph costs no sync. Eager steps use the same bounds.

`prepare(greedy)` warms up (Triton compiles, cuBLAS picks kernels) and captures every bucket of
that kind once; the constructor prepares the kind it is given. Warm-up steps run at the
cache's last position: they write junk only at a position no sequence can read before its own
step writes it. `runner_for(model, ...)` keeps one runner per model, so repeated `generate`
calls reuse its cache and graphs. On CPU the step runs eagerly, with no warm-up.
"""

from __future__ import annotations

import weakref

import torch

from evokernel.engine.cache import KVCache
from evokernel.engine.decoder import DecoderModel

WARMUP_STEPS = 2
MIN_BUCKET = 256


def context_buckets(max_seq_len: int) -> list[int]:
    """Bounds on seq_lens, one graph each: powers of two from MIN_BUCKET, then the cache length."""
    bounds = []
    bound = MIN_BUCKET
    while bound < max_seq_len:
        bounds.append(bound)
        bound *= 2
    return [*bounds, max_seq_len]


class DecodeRunner:
    """Decode steps over `cache` (all B rows) from static buffers; see the module doc."""

    def __init__(
        self, model: DecoderModel, cache: KVCache, *, use_graph: bool, greedy: bool
    ) -> None:
        B, device = cache.batch, cache.device
        assert not use_graph or device.type == "cuda", "CUDA graphs need a CUDA cache"
        self.model = model
        self.cache = cache
        self.greedy = greedy
        self.use_graph = use_graph
        self.tokens = torch.zeros(B, dtype=torch.int64, device=device)
        self.positions = torch.zeros(B, dtype=torch.int32, device=device)
        self.seq_lens = torch.ones(B, dtype=torch.int32, device=device)
        self.bounds = context_buckets(cache.max_seq_len)
        self.longest = 1  # host copy of max(seq_lens) for the next step
        self.graphs: dict[tuple[bool, int], torch.cuda.CUDAGraph] = {}
        self._logits: dict[int, torch.Tensor] = {}
        self._pool = torch.cuda.graph_pool_handle() if use_graph else None
        self.prepare(greedy)

    @property
    def uses_graph(self) -> bool:
        return self.use_graph

    def prepare(self, greedy: bool) -> None:
        """Make `greedy` the current step kind; on CUDA warm up and capture its buckets once."""
        self.greedy = greedy
        if self.cache.device.type != "cuda" or any(kind == greedy for kind, _ in self.graphs):
            return
        saved = (self.tokens.clone(), self.positions.clone(), self.seq_lens.clone())
        last = self.cache.max_seq_len - 1
        stream = torch.cuda.Stream(device=self.cache.device)
        for bound in self.bounds:
            for _ in range(WARMUP_STEPS):  # each step advances the buffers: park it again
                self._park(last)
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    self._body(bound)
                torch.cuda.current_stream().wait_stream(stream)
            if self.use_graph:
                self._park(last)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self._pool):
                    out = self._body(bound)
                if out is not None:
                    self._logits[bound] = out
                self.graphs[(greedy, bound)] = graph
        for buffer, value in zip((self.tokens, self.positions, self.seq_lens), saved):
            buffer.copy_(value)
        torch.cuda.synchronize(self.cache.device)

    def _park(self, position: int) -> None:
        self.tokens.zero_()
        self.positions.fill_(position)
        self.seq_lens.fill_(position + 1)

    def start(
        self, tokens: torch.Tensor, positions: torch.Tensor, longest: int | None = None
    ) -> None:
        """Next step feeds tokens [B] at positions [B] (copied into the static buffers).
        `longest` = max(positions) + 1 if the caller knows it (else read back once)."""
        self.tokens.copy_(tokens)
        self.positions.copy_(positions)
        self.seq_lens.copy_(positions)
        self.seq_lens.add_(1)
        self.longest = int(positions.max()) + 1 if longest is None else longest

    def feed(self, tokens: torch.Tensor) -> None:
        self.tokens.copy_(tokens)

    def bound(self) -> int:
        """The smallest bucket bound that holds the next step's longest sequence."""
        for bound in self.bounds:
            if self.longest <= bound:
                return bound
        raise ValueError(f"position {self.longest - 1} is past the cache's {self.bounds[-1]}")

    def step(self) -> torch.Tensor | None:
        """One decode step. Sampling steps return the logits [B, V] float32; greedy steps
        return None (the next tokens are in `tokens`)."""
        bound = self.bound()
        self.longest += 1
        graph = self.graphs.get((self.greedy, bound))
        if graph is None:
            return self._body(bound)
        graph.replay()
        return None if self.greedy else self._logits[bound]

    def _body(self, bound: int) -> torch.Tensor | None:
        model = self.model
        if self.greedy:
            model.decode_greedy(self.tokens, self.positions, self.seq_lens, self.cache, bound)
            return None
        logits = model.decode(self.tokens, self.positions, self.seq_lens, self.cache, bound)
        self.positions.add_(1)
        self.seq_lens.add_(1)
        return logits


_RUNNERS: weakref.WeakKeyDictionary[DecoderModel, DecodeRunner] = weakref.WeakKeyDictionary()


def runner_for(
    model: DecoderModel, batch: int, need: int, *, use_graph: bool, greedy: bool
) -> DecodeRunner:
    """The model's kept runner when its cache has `batch` rows and at least `need` positions
    (and the same graph mode), else a new one, kept instead, with a cache of the next power of
    two >= need positions (at least MIN_BUCKET, at most the model's). Prepared for `greedy`."""
    runner = _RUNNERS.get(model)
    if (
        runner is not None
        and runner.cache.batch == batch
        and runner.cache.max_seq_len >= need
        and runner.use_graph == use_graph
    ):
        runner.prepare(greedy)
        return runner
    if runner is not None:
        del _RUNNERS[model]
        del runner  # free its cache and graphs before allocating new ones
        if model.device.type == "cuda":
            torch.cuda.empty_cache()
    size = MIN_BUCKET
    while size < need:
        size *= 2
    cache = model.new_cache(batch, min(size, model.max_seq_len))
    runner = DecodeRunner(model, cache, use_graph=use_graph, greedy=greedy)
    _RUNNERS[model] = runner
    return runner
