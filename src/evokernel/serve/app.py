"""The HTTP application (Starlette): routes, API key, limits, streaming, errors.

  GET  /health                 200 {"status": "ok"} while the engine runs, else 503
  GET  /metrics                Prometheus text (serve/metrics.py)
  GET  /v1/models              the served model
  POST /v1/completions         text or token-id prompt
  POST /v1/chat/completions    messages through the chat template

With an API key configured, /v1/* need `Authorization: Bearer KEY` (401 otherwise); /health
and /metrics stay open. The key is compared in constant time and never logged. Every error is
OpenAI's JSON error body with its status (serve/errors.py): 400 for a malformed body (naming
the field) or a prompt longer than the context (with the numbers), 404 for an unknown model
or path, 413 for a body over `MAX_BODY`, 429 with Retry-After when `max_batch + max_queue`
requests are already in flight, 503 while shutting down or after the engine died.

Streaming responses are server-sent events written by `EventStream`, which also watches the
connection: when the client goes away, the generator is cancelled and the request leaves the
engine's batch at its next step. A non-streaming request is cancelled the same way.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from evokernel.serve.engine_client import EngineClient
from evokernel.serve.errors import APIError
from evokernel.serve.formats import Format, usage
from evokernel.serve.generation import Generation, Piece
from evokernel.serve.jobs import Job, Served
from evokernel.serve.metrics import Metrics
from evokernel.serve.protocol import ChatRequest, CompletionRequest, parse

MAX_BODY = 32 << 20


@dataclass
class ServerState:
    engine: EngineClient
    served: Served
    metrics: Metrics
    api_key: str | None
    max_queue: int
    draining: bool = False

    @property
    def capacity(self) -> int:
        return self.engine.settings.max_batch + self.max_queue


def json_response(doc: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(body, status, headers=headers, media_type="application/json")


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.serve
    return state


def _authorize(request: Request, state: ServerState) -> None:
    if state.api_key is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        token.strip().encode(), state.api_key.encode()
    ):
        what = "no API key provided" if not header else "incorrect API key provided"
        raise APIError(401, f"{what} (Authorization: Bearer KEY)", code="invalid_api_key")


async def _body(request: Request) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY:
        raise APIError(413, f"the body is larger than {MAX_BODY >> 20} MiB")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise APIError(413, f"the body is larger than {MAX_BODY >> 20} MiB")
        chunks.append(chunk)
    return b"".join(chunks)


async def health(request: Request) -> Response:
    state = _state(request)
    if state.draining or not state.engine.alive:
        return json_response({"status": "unavailable"}, 503)
    return json_response({"status": "ok"})


async def metrics(request: Request) -> Response:
    return Response(
        _state(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
    )


async def models(request: Request) -> Response:
    state = _state(request)
    _authorize(request, state)
    served = state.served
    card = {
        "id": served.name,
        "object": "model",
        "created": 0,
        "owned_by": "evokernel",
        "max_model_len": served.max_len,
    }
    return json_response({"object": "list", "data": [card]})


async def completions(request: Request) -> Response | EventStream:
    return await _generate(request, chat=False)


async def chat_completions(request: Request) -> Response | EventStream:
    return await _generate(request, chat=True)


async def _generate(request: Request, chat: bool) -> Response | EventStream:
    arrived = time.perf_counter()
    state = _state(request)
    endpoint = "chat" if chat else "completions"
    status = 500
    try:
        _authorize(request, state)
        body = await _body(request)
        served = state.served
        if chat:
            job = served.chat_job(parse(ChatRequest, body))
        else:
            job = served.completion_job(parse(CompletionRequest, body))
        if state.draining:
            raise APIError(503, "the server is shutting down", headers={"Retry-After": "5"})
        if not state.engine.alive:
            raise APIError(503, "the engine process is not running (see the server's log)")
        if state.engine.in_flight >= state.capacity:
            raise APIError(
                429,
                f"the server is at capacity ({state.engine.in_flight} requests in flight: "
                f"--max-batch {state.engine.settings.max_batch} + --max-queue {state.max_queue})",
                headers={"Retry-After": "1"},
            )
        stream = state.engine.submit(job.ids, job.params, job.max_tokens, job.stop_ids)
        state.metrics.prompt_tokens.inc(len(job.ids))
        gen = Generation(job, stream, state.engine, served.tokenizer, state.metrics, arrived)
        fmt = Format(chat, served.name, served.tokenizer, job.logprobs)
        status = 200
        if job.stream:
            return EventStream(_events(gen, fmt, job), gen.close)
        return await _whole(request, gen, fmt, job)
    except APIError as err:
        status = err.status
        raise
    finally:
        state.metrics.requests.labels(endpoint, str(status)).inc()


async def _events(gen: Generation, fmt: Format, job: Job) -> AsyncIterator[bytes]:
    opening = fmt.opening()
    if opening:
        yield opening
    try:
        while not gen.finished:
            yield fmt.chunk(await gen.next())
    except APIError as err:  # the engine died mid-stream: say so in the stream
        yield b"data: " + json.dumps(err.body()).encode() + b"\n\n"
        return
    counts = usage(len(job.ids), gen.completion_tokens) if job.include_usage else None
    yield fmt.closing(counts)


async def _whole(request: Request, gen: Generation, fmt: Format, job: Job) -> Response:
    async def collect() -> list[Piece]:
        pieces: list[Piece] = []
        while not gen.finished:
            pieces.extend(await gen.next())
        return pieces

    work = asyncio.ensure_future(collect())
    gone = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not work.done():
            work.cancel()
        gone.cancel()
        gen.close()
    if not work.done() or work.cancelled():
        return Response(status_code=499)  # nobody is listening
    pieces = work.result()
    assert gen.finish_reason is not None
    return json_response(
        fmt.whole(pieces, gen.finish_reason, usage(len(job.ids), gen.completion_tokens))
    )


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStream:
    """A `text/event-stream` response that stops its producer when the client leaves."""

    def __init__(self, chunks: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        self.chunks = chunks
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})

        async def pump() -> None:
            async for chunk in self.chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        work = asyncio.ensure_future(pump())
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
            if work.done():
                work.result()  # re-raise a failure of the producer
        finally:
            for task in (work, gone):
                if not task.done():
                    task.cancel()
            await asyncio.gather(work, gone, return_exceptions=True)
            await self.chunks.aclose()  # type: ignore[attr-defined]
            self.on_close()


async def _api_error(request: Request, err: Exception) -> Response:
    assert isinstance(err, APIError)
    return json_response(err.body(), err.status, err.headers)


async def _http_error(request: Request, err: Exception) -> Response:
    assert isinstance(err, HTTPException)
    return json_response(APIError(err.status_code, str(err.detail)).body(), err.status_code)


async def _server_error(request: Request, err: Exception) -> Response:
    # No traceback to the client; uvicorn logs it on the server's stderr.
    message = f"internal error: {type(err).__name__}"
    return json_response(APIError(500, message).body(), 500)


def build_app(state: ServerState) -> Starlette:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.engine.attach(asyncio.get_running_loop())
        yield
        state.draining = True
        await state.engine.stop()

    routes = [
        Route("/health", health),
        Route("/metrics", metrics),
        Route("/v1/models", models),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            APIError: _api_error,
            HTTPException: _http_error,
            Exception: _server_error,
        },
    )
    app.state.serve = state
    return app
