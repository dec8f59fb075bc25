"""The HTTP process's handle on the engine process (serve/scheduler.py).

    engine = EngineClient(settings)
    info = engine.start(timeout_s)          # blocks until the model is loaded and graphs captured
    engine.attach(loop)                     # outputs now arrive on the event loop
    stream = engine.submit(ids, params, max_tokens, stop_ids)
    async for event in stream: ...          # TokenEvent, the last one has `finish`
    engine.cancel(stream.rid)

The engine runs in its own process (spawned), so its loop never waits for the HTTP side's
Python (JSON, SSE, sockets) to release the GIL, and the HTTP side never waits for a step:
they meet in one pipe, one message per engine step. Outputs are read by an event-loop reader
on the pipe and put on each request's queue. Messages to the engine go through a sender
thread, so the event loop never blocks on a full pipe (and the two processes can never both
wait to send: the loop always keeps reading). If the engine dies, every open stream gets an
error event and `alive` turns false.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing as mp
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evokernel.engine.batching import RowParams
from evokernel.errors import EvokernelError
from evokernel.serve.scheduler import EngineSettings, engine_main


@dataclass(frozen=True)
class TokenEvent:
    token: int
    logprob: float | None = None
    top: list[tuple[int, float]] | None = None
    finish: str | None = None  # "stop" | "length" on the last token
    error: str | None = None  # the engine failed: no token


class TokenStream:
    """One request's tokens as the engine produces them."""

    def __init__(self, rid: int) -> None:
        self.rid = rid
        self.queue: asyncio.Queue[TokenEvent] = asyncio.Queue()

    async def next_batch(self) -> list[TokenEvent]:
        """Every event available now (waiting for at least one)."""
        first = await self.queue.get()
        batch = [first]
        while not self.queue.empty():
            batch.append(self.queue.get_nowait())
        return batch


StatsHook = Callable[[int, int, int, dict[str, Any]], None]  # rows, running, waiting, work


class EngineClient:
    def __init__(self, settings: EngineSettings, on_stats: StatsHook | None = None) -> None:
        self.settings = settings
        self.on_stats = on_stats
        self.info: dict[str, Any] = {}
        self.alive = False
        self._streams: dict[int, TokenStream] = {}
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bye: asyncio.Future[None] | None = None

    @property
    def in_flight(self) -> int:
        return len(self._streams)

    def start(self, timeout_s: float) -> dict[str, Any]:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(
            target=engine_main, args=(child, self.settings), name="evokernel-engine", daemon=True
        )
        self._proc.start()
        child.close()
        if not self._conn.poll(timeout_s):
            self.kill()
            raise EvokernelError(f"the engine did not start within {timeout_s:g} s")
        try:
            kind, payload = self._conn.recv()
        except EOFError:
            self._proc.join(5)
            raise EvokernelError(
                f"the engine process exited during start-up (code {self._proc.exitcode})"
            ) from None
        if kind == "error":
            self._proc.join(10)
            raise EvokernelError(payload)
        self.info = payload
        self.alive = True
        self._outbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send_loop, name="engine-send", daemon=True)
        self._sender.start()
        return payload

    def _send_loop(self) -> None:
        while (msg := self._outbox.get()) is not None:
            try:
                self._conn.send(msg)
            except OSError:
                return  # the engine is gone; the reader reports it

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self._conn.fileno(), self._on_readable)

    def submit(
        self, ids: list[int], params: RowParams, max_tokens: int, stop_ids: frozenset[int]
    ) -> TokenStream:
        rid = next(self._ids)
        stream = TokenStream(rid)
        self._streams[rid] = stream
        self._outbox.put(("add", rid, ids, params, max_tokens, tuple(stop_ids)))
        return stream

    def cancel(self, rid: int) -> None:
        """Drop a request (its slot is freed at the engine's next step)."""
        if self._streams.pop(rid, None) is not None and self.alive:
            self._outbox.put(("cancel", rid))

    def _on_readable(self) -> None:
        try:
            while self._conn.poll():
                msg = self._conn.recv()
                if msg[0] == "out":
                    self._dispatch(msg[1], msg[2], msg[3])
                elif msg[0] == "bye" and self._bye is not None and not self._bye.done():
                    self._bye.set_result(None)
        except (EOFError, OSError):
            self._engine_gone()

    def _dispatch(
        self, events: list[tuple[Any, ...]], stats: tuple[int, int, int], work: dict[str, Any]
    ) -> None:
        streams = self._streams
        for rid, token, logprob, top, finish in events:
            stream = streams.get(rid)
            if stream is None:
                continue  # cancelled meanwhile
            stream.queue.put_nowait(TokenEvent(token, logprob, top, finish))
            if finish is not None:
                del streams[rid]
        if self.on_stats is not None:
            self.on_stats(*stats, work)

    def _engine_gone(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self._conn.fileno())
        self.alive = False
        for stream in self._streams.values():
            stream.queue.put_nowait(TokenEvent(-1, error="the engine process stopped"))
        self._streams.clear()
        if self._bye is not None and not self._bye.done():
            self._bye.set_result(None)

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the engine to leave its loop; kill it if it does not within `timeout_s`."""
        if self.alive:
            assert self._loop is not None
            self._bye = self._loop.create_future()
            self._outbox.put(("stop",))
            self._outbox.put(None)  # the sender thread ends after it
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._bye, timeout_s)
            self.alive = False
            if self._loop is not None:
                self._loop.remove_reader(self._conn.fileno())
        self._proc.join(timeout_s)
        self.kill()

    def kill(self) -> None:
        if self.info:
            self._outbox.put(None)  # let the sender thread end
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
