"""The load of `bench serve`: concurrent streaming clients, each timing every token it receives.

    records = drive(url, model, concurrency=8, prompts=[[...], ...], max_tokens=128, rounds=3)

`concurrency` clients run at once; each sends `rounds` requests one after another (client c's
request r takes prompt (c + r) mod len(prompts)), all streaming `/v1/completions` with token-id
prompts, greedy, `ignore_eos`, so every request generates exactly `max_tokens` tokens. A client
records, per request, when it sent it, when each server-sent event arrived (one per token) and
the usage the server reported. Before the clock starts, each client opens its connection
(a `/health` request), so no request pays a connection's or a client's set-up. The clients are
spread over up to `CLIENT_PROCESSES` processes
(asyncio + httpx in each), so that reading 20k+ events per second is not itself the bottleneck;
their clocks are all `time.perf_counter` (CLOCK_MONOTONIC, one clock for every process).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

CLIENT_PROCESSES = 8
START_DELAY_S = 5.0  # time for the client processes to start and import before the first send


@dataclass
class RequestRecord:
    prompt_len: int
    sent: float  # perf_counter when the request was sent
    arrivals: list[float] = field(default_factory=list)  # one per token event
    completion_tokens: int = 0  # from the usage event
    error: str | None = None


async def _one(client: Any, url: str, body: dict[str, Any], record: RequestRecord) -> None:
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                record.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                now = time.perf_counter()
                payload = line[6:]
                if payload == "[DONE]":
                    break
                doc = json.loads(payload)
                if doc.get("choices"):
                    record.arrivals.append(now)
                elif doc.get("usage"):
                    record.completion_tokens = doc["usage"]["completion_tokens"]
    except Exception as err:  # a failed request is a result of the benchmark, not a crash
        record.error = f"{type(err).__name__}: {err}"


async def _clients(job: dict[str, Any]) -> list[dict[str, Any]]:
    import httpx

    url = job["url"] + "/v1/completions"
    prompts = job["prompts"]
    limits = httpx.Limits(max_connections=len(job["clients"]) + 1)
    records: list[RequestRecord] = []
    async with httpx.AsyncClient(timeout=job["timeout_s"], limits=limits) as client:
        # one kept-alive connection per client, opened (and the client's lazy set-up done)
        # before the clock starts: the load measures the server, not a client's first request
        await asyncio.gather(*(client.get(job["url"] + "/health") for _ in job["clients"]))
        # every process starts its clients at the same moment
        await asyncio.sleep(max(0.0, job["start_at"] - time.perf_counter()))

        async def run(c: int) -> None:
            for r in range(job["rounds"]):
                prompt = prompts[(c + r) % len(prompts)]
                body = {
                    "model": job["model"],
                    "prompt": prompt,
                    "max_tokens": job["max_tokens"],
                    "temperature": 0,
                    "ignore_eos": True,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                record = RequestRecord(len(prompt), time.perf_counter())
                records.append(record)
                await _one(client, url, body, record)

        await asyncio.gather(*(run(c) for c in job["clients"]))
    return [asdict(r) for r in records]


def _process(job: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(_clients(job))


def drive(
    url: str,
    model: str,
    concurrency: int,
    prompts: list[list[int]],
    max_tokens: int,
    rounds: int,
    timeout_s: float = 600.0,
) -> list[RequestRecord]:
    procs = max(1, min(concurrency, CLIENT_PROCESSES, (os.cpu_count() or 2) // 2))
    start_at = time.perf_counter() + (START_DELAY_S if procs > 1 else 0.0)
    jobs = [
        {
            "start_at": start_at,
            "url": url,
            "model": model,
            "prompts": prompts,
            "max_tokens": max_tokens,
            "rounds": rounds,
            "timeout_s": timeout_s,
            "clients": list(range(p, concurrency, procs)),
        }
        for p in range(procs)
    ]
    if procs == 1:
        docs = _process(jobs[0])
    else:
        with mp.get_context("spawn").Pool(procs) as pool:
            docs = [d for part in pool.map(_process, jobs) for d in part]
    return [RequestRecord(**d) for d in docs]
