"""Worker side (CUDA only): a short profiler pass over a few candidate calls.

The window holds one marker kernel enqueued on the launching stream before the calls, then the
calls, then a device-wide synchronize. Every GPU activity in it (kernels, copies, memsets) is
returned as (name, category, stream, start, duration) for the parent to judge: the marker
names the launching stream's id in the trace; the candidate's own Triton kernels must appear,
carry most of the GPU time, and nothing may run on another stream.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import torch

from evokernel.evaluate.protocol import GpuEvent
from evokernel.evaluate.worker.calls import Caller

_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def _stream_of(event: dict[str, Any]) -> int | None:
    """The CUDA stream of a GPU activity: its "stream" argument, else its thread id (for GPU
    activities the trace's tid is the stream, as a number or as "stream N")."""
    args = event.get("args") or {}
    stream = args.get("stream")
    if isinstance(stream, int):
        return stream
    tid = event.get("tid")
    if isinstance(tid, int):
        return tid
    text = str(tid or "")
    digits = "".join(ch for ch in text if ch.isdigit())
    return int(digits) if text.startswith("stream") and digits else None


def gpu_events(trace_path: str) -> list[GpuEvent]:
    with open(trace_path) as f:
        trace = json.load(f)
    found = []
    for event in trace.get("traceEvents", []):
        if event.get("ph") != "X" or event.get("cat") not in _CATEGORIES:
            continue
        found.append(
            GpuEvent(
                name=str(event.get("name", ""))[:200],
                cat=str(event["cat"]),
                stream=_stream_of(event),
                ts=float(event.get("ts", 0.0)),
                dur=float(event.get("dur", 0.0)),
            )
        )
    found.sort(key=lambda e: e.ts)
    return found


def profile_calls(
    caller: Caller, fn: Callable[..., Any], inputs: dict[str, Any], calls: int, workdir: str
) -> tuple[list[GpuEvent], str | None]:
    """(the GPU activities of the window, None) or ([], reason line). The first call warms up,
    outside the window."""
    out, line = caller.call(fn, inputs)
    if line is not None:
        return [], line
    del out
    marker = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        marker.add_(1.0)
        for _ in range(calls):
            _out, line = caller.call(fn, inputs)
            if line is not None:
                return [], line
        torch.cuda.synchronize()
    path = os.path.join(workdir, "trace.json")
    prof.export_chrome_trace(path)
    try:
        return gpu_events(path), None
    finally:
        os.remove(path)
