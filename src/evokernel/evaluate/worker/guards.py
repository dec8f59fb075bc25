"""Tamper detection inside the worker: identities of the functions the harness relies on,
threads and streams. Installed during trusted setup, before the candidate is imported.

* `patched`: identities (and, for Python functions, code objects) of every callable in the
  namespaces the harness and the baselines use (time, builtins, threading, torch,
  torch.nn.functional, torch.cuda, the Tensor class and its C base, CUDA events and streams,
  the evaluator's and the task's own modules) are snapshot after setup and compared after the
  import and after every phase. The harness itself calls only references it captured before the
  import, so a patch cannot change a measurement; it is reported because it is an attempt.
* `thread`: `threading.Thread.start` and `_thread.start_new_thread` are wrapped to count starts
  while candidate code runs; Python threads alive that did not exist at setup are reported, and
  so is growth of the OS thread count (/proc/self/task) across the import and across timed
  calls (moments when no library starts threads of its own).
* `side-stream`: CUDA stream construction is wrapped to count streams the candidate creates
  (new pool streams and external streams; not torch's wrappers of existing streams, which
  `torch.cuda.current_stream()` builds); after every call the current stream must still be
  the launching stream. Streams obtained around the wrapper are left to the profiler and the
  timer cross-check.

A candidate with ctypes or a debugger can defeat any in-process check; these exist to make
cheating deliberate and visible. The comparator and the statistics live in the parent.
"""

from __future__ import annotations

import _thread
import builtins
import os
import sys
import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional

from evokernel.reasons import reason


def _os_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _python_threads() -> set[int]:
    return set(sys._current_frames()) | {t.ident for t in threading.enumerate() if t.ident}


def _identity(value: Any) -> tuple[int, int]:
    code = getattr(value, "__code__", None) if isinstance(value, types.FunctionType) else None
    return id(value), id(code)


_TORCH_COMPILE_PY = os.path.join(os.path.dirname(torch.__file__), "_compile.py")


def _lazy_torch_wrap(value: Any, original: int) -> bool:
    """True for torch's own lazy rebinding: importing torch._dynamo (which some torch calls do)
    wraps e.g. torch.manual_seed in `_disable_dynamo` (torch/_compile.py), keeping the
    original as __wrapped__."""
    code = getattr(value, "__code__", None)
    wrapped = getattr(value, "__wrapped__", None)
    return (
        isinstance(value, types.FunctionType)
        and code is not None
        and code.co_filename == _TORCH_COMPILE_PY
        and id(wrapped) == original
    )


class Guards:
    """One per worker. `install()` before the candidate's import, `snapshot()` right after
    trusted setup; `active()` around every candidate call; `problems()` after each phase."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.depth = 0
        self.thread_starts: list[str] = []
        self.streams_created = 0
        self.identities: dict[str, tuple[int, int]] = {}
        self.threads: set[int] = set()
        self.launch_stream: Any = None
        self.reported: set[str] = set()

    # --- wrappers ----------------------------------------------------------------------------
    def install(self) -> None:
        guards = self
        thread_start = threading.Thread.start

        def start(thread: threading.Thread) -> None:
            if guards.depth:
                guards.thread_starts.append(f"threading.Thread({thread.name})")
            thread_start(thread)

        threading.Thread.start = start  # type: ignore[method-assign,assignment]
        for name in ("start_new_thread", "start_joinable_thread", "start_new"):
            original = getattr(_thread, name, None)
            if original is not None:
                setattr(_thread, name, self._counting(original, f"_thread.{name}"))
        if self.cuda:
            for cls in (torch.cuda.Stream, torch.cuda.ExternalStream):
                self._count_streams(cls)

    def _counting(self, original: Any, label: str) -> Any:
        guards = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if guards.depth:
                guards.thread_starts.append(label)
            return original(*args, **kwargs)

        return wrapper

    def _count_streams(self, cls: type) -> None:
        guards = self
        original = cls.__new__

        def new(klass: type, *args: Any, **kwargs: Any) -> Any:
            # torch wraps existing streams (current_stream(), Event.record()) by stream_id;
            # only constructions without one create a stream.
            if guards.depth and ("stream_id" not in kwargs or "stream_ptr" in kwargs):
                guards.streams_created += 1
            return original(klass, *args, **kwargs)

        cls.__new__ = staticmethod(new)  # type: ignore[assignment]

    # --- snapshots ---------------------------------------------------------------------------
    def _namespaces(self, extra_modules: list[types.ModuleType]) -> Iterator[tuple[str, Any]]:
        modules: list[types.ModuleType] = [time, builtins, threading, _thread, torch]
        modules += [torch.nn.functional, torch.cuda, torch.linalg, *extra_modules]
        for module in modules:
            for name, value in list(vars(module).items()):
                if name.startswith("_") and module is not builtins:
                    continue
                if callable(value):
                    yield f"{module.__name__}.{name}", value
        classes: list[type] = [torch.Tensor, torch._C.TensorBase, threading.Thread]
        if self.cuda:
            classes += [torch.cuda.Event, torch.cuda.Stream, torch._C._CudaEventBase]
        for cls in classes:
            for name, value in list(vars(cls).items()):
                if name in ("__dict__", "__weakref__", "__doc__", "__module__"):
                    continue
                yield f"{cls.__module__}.{cls.__qualname__}.{name}", value

    def snapshot(self, extra_modules: list[types.ModuleType]) -> None:
        self.extra_modules = extra_modules
        self.identities = {
            name: _identity(value) for name, value in self._namespaces(extra_modules)
        }
        self.threads = _python_threads()
        if self.cuda:
            self.launch_stream = torch.cuda.current_stream()

    @contextmanager
    def active(self) -> Iterator[None]:
        """Around candidate code: thread and stream constructions are attributed to it."""
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    # --- checks ------------------------------------------------------------------------------
    def os_threads(self) -> int:
        return _os_threads()

    def problems(self) -> list[str]:
        """New reason lines since the last call (each distinct problem reported once)."""
        found = []
        now = dict(self._namespaces(self.extra_modules))
        changed = sorted(
            name
            for name, ident in self.identities.items()
            if name not in now
            or (_identity(now[name]) != ident and not _lazy_torch_wrap(now[name], ident[0]))
        )
        if changed:
            shown = ", ".join(changed[:6]) + (
                f" (+{len(changed) - 6} more)" if len(changed) > 6 else ""
            )
            found.append(reason("patched", f"replaced or removed: {shown}"))
        if self.thread_starts:
            found.append(reason("thread", f"started {', '.join(sorted(set(self.thread_starts)))}"))
        alive = _python_threads() - self.threads
        if alive:
            found.append(
                reason("thread", f"{len(alive)} Python thread(s) alive that setup did not start")
            )
        if self.streams_created:
            found.append(reason("side-stream", f"created {self.streams_created} CUDA stream(s)"))
        if self.cuda and self.launch_stream is not None:
            current = torch.cuda.current_stream()
            if current != self.launch_stream:
                found.append(reason("side-stream", "the current CUDA stream was changed"))
        fresh = [line for line in found if line not in self.reported]
        self.reported.update(fresh)
        return fresh

    def os_thread_growth(self, before: int, when: str) -> list[str]:
        after = _os_threads()
        if after > before:
            line = reason("thread", f"{after - before} OS thread(s) appeared {when}")
            if line not in self.reported:
                self.reported.add(line)
                return [line]
        return []
