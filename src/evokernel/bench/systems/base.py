"""What the decode benchmark asks of each system (our engine or a baseline), and cache sizing.

A `System` holds one loaded model for the whole run of that system; `open` gives a `Session`
for one context position, whose KV cache it sizes itself (`right_sized` unless the system's
cache grows). The benchmark drives a session like this, inside `system.context()`:

    s = system.open(prompt, need)   # prompt: `position` token ids; need: positions to hold
    s.prefill()                     # fresh prefill of the prompt + greedy first token (on device)
    s.rewind()                      # the next step decodes that first token at `position`
    s.step() ...                    # one greedy decode step each; the token feeds the next step
    s.close()

Steps never read tokens back to the host (except where a system cannot do otherwise: then
`host_timed` is True and the benchmark times each step by the host clock, which the step's
own synchronization makes exact). `rewind` lets the benchmark warm up, time, and re-run the
same steps (positions position..position+k) without a longer cache.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import torch

CACHE_ROUND = 128  # cache lengths are multiples of this (few distinct shapes, little waste)


def right_sized(need: int) -> int:
    """The static cache length a session allocates to hold `need` positions."""
    return -(-need // CACHE_ROUND) * CACHE_ROUND


class Session(Protocol):
    cache_len: int | None  # positions the KV cache holds; None for a cache that grows

    def prefill(self) -> None: ...

    def rewind(self) -> None: ...

    def step(self) -> None: ...

    def close(self) -> None: ...


class System(Protocol):
    name: str
    host_timed: bool

    def open(self, prompt: list[int], need: int) -> Session: ...

    def context(self) -> contextlib.AbstractContextManager[Any]: ...

    def setup(self) -> dict[str, Any]:
        """How this system runs (ops, compile mode, cache policy, graphs compiled): the
        result file's `options.setup[name]`."""
        ...

    def close(self) -> None: ...


@contextlib.contextmanager
def inference() -> Iterator[None]:
    with torch.inference_mode():
        yield


def greedy_token(logits: torch.Tensor) -> torch.Tensor:
    """[B, T, V] logits (the last position is read) -> next tokens [B, 1] int64, on device."""
    return logits[:, -1].argmax(dim=-1, keepdim=True)
