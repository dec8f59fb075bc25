"""One request's output as it is generated: token events -> text pieces, finish, counts.

    gen = Generation(job, stream, engine, tokenizer, metrics)
    while not gen.finished:
        for piece in await gen.next():   # one Piece per token, in order
            ...
    gen.close()                          # cancels the request in the engine if unfinished

Each token gives one `Piece` (its text may be empty: part of a character, special tokens, or
text held back because it may begin a stop string). The last piece carries `finish`: "stop"
(an EOS or stop id, or a stop string, which ends generation at once and frees the slot),
"length" (max_tokens). Timing goes to the metrics: time to first token from the request's
arrival, and the gap between consecutive tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evokernel.serve.errors import APIError
from evokernel.serve.text import OutputText, ThinkSplitter

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from evokernel.serve.engine_client import EngineClient, TokenStream
    from evokernel.serve.jobs import Job
    from evokernel.serve.metrics import Metrics


@dataclass
class Piece:
    token: int
    text: str  # completions: the text; chat: the content delta
    reasoning: str  # chat with a think block: the reasoning delta
    logprob: float | None
    top: list[tuple[int, float]] | None
    finish: str | None


class Generation:
    def __init__(
        self,
        job: Job,
        stream: TokenStream,
        engine: EngineClient,
        tokenizer: Tokenizer,
        metrics: Metrics,
        arrived: float,
    ) -> None:
        self.job = job
        self.stream = stream
        self.engine = engine
        self.metrics = metrics
        self.arrived = arrived
        self.text = OutputText(tokenizer, job.stop)
        self.think = ThinkSplitter() if job.think else None
        self.completion_tokens = 0
        self.finish_reason: str | None = None
        self._last: float | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    async def next(self) -> list[Piece]:
        events = await self.stream.next_batch()
        now = time.perf_counter()
        pieces = []
        for event in events:
            if event.error is not None:
                self.finish_reason = "error"
                raise APIError(503, event.error)
            self.completion_tokens += 1
            text = self.text.push(event.token)
            finish = event.finish
            if self.text.stopped:
                finish = "stop"
                if event.finish is None:
                    self.engine.cancel(self.stream.rid)  # stop string: free the slot now
            elif finish is not None:
                text += self.text.flush()
            reasoning = ""
            if self.think is not None:
                reasoning, text = self.think.push(text)
                if finish is not None:
                    r, c = self.think.flush()
                    reasoning, text = reasoning + r, text + c
            pieces.append(Piece(event.token, text, reasoning, event.logprob, event.top, finish))
            if finish is not None:
                self.finish_reason = finish
                break
        self._observe(now, len(pieces))
        return pieces

    def _observe(self, now: float, n: int) -> None:
        m = self.metrics
        m.generation_tokens.inc(n)
        if self._last is None:
            m.ttft.observe(now - self.arrived)
        else:
            m.itl.observe(now - self._last)
        for _ in range(n - 1):
            m.itl.observe(0.0)  # arrived together
        self._last = now
        if self.finished:
            m.e2e.observe(now - self.arrived)

    def close(self) -> None:
        """Free the engine's slot if generation did not finish (client gone, shutdown)."""
        if not self.finished:
            self.finish_reason = "cancelled"
            self.engine.cancel(self.stream.rid)
            self.metrics.cancelled.inc()
