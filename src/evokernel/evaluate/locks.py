"""Who may use a device when: timings are never concurrent.

Each device (one GPU, or the CPU) has a `DeviceSlot` with a readers-writer lock. Correctness
jobs take it shared (several workers may check candidates at once); a timed phase takes it
exclusive, which waits for the running correctness jobs to finish and holds new ones back, so
nothing else of this evaluator runs on the device while it is timed. The exclusive side also
takes an advisory file lock (`flock`) named after the device, so timings of two evaluator
processes on one machine do not overlap either.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager


class _RWLock:
    """Writer-preferring readers-writer lock."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._waiting_writers:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting_writers += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting_writers -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class DeviceSlot:
    """One device: `kind` ("cuda" | "cpu") and, for CUDA, the CUDA_VISIBLE_DEVICES entry."""

    def __init__(self, kind: str, visible: str | None) -> None:
        self.kind = kind
        self.visible = visible
        self._lock = _RWLock()
        label = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{kind}-{visible or 'all'}")
        self._path = os.path.join(tempfile.gettempdir(), f"evokernel-timing-{label}.lock")

    def shared(self) -> AbstractContextManager[None]:
        return self._lock.shared()

    def torch_device(self) -> str:
        """This device as this process names it in torch ("cpu", "cuda:I")."""
        if self.kind != "cuda":
            return "cpu"
        gpus = visible_gpus()
        return f"cuda:{gpus.index(self.visible) if self.visible in gpus else 0}"

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._lock.exclusive():
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)


_SLOTS: dict[tuple[str, str | None], DeviceSlot] = {}
_SLOTS_LOCK = threading.Lock()


def visible_gpus() -> list[str]:
    """CUDA_VISIBLE_DEVICES entries (or indices) of the GPUs this process may use."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip():
        return [e.strip() for e in env.split(",") if e.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def slot(kind: str, index: int = 0) -> DeviceSlot:
    """The process-wide slot of the `index`-th visible GPU (or of the CPU)."""
    visible = None
    if kind == "cuda":
        gpus = visible_gpus() or ["0"]
        visible = gpus[index % len(gpus)]
    return slot_of(kind, visible)


def slot_of(kind: str, visible: str | None) -> DeviceSlot:
    """The process-wide slot of the GPU with CUDA_VISIBLE_DEVICES entry `visible` (or of the
    CPU)."""
    with _SLOTS_LOCK:
        key = (kind, visible if kind == "cuda" else None)
        if key not in _SLOTS:
            _SLOTS[key] = DeviceSlot(*key)
        return _SLOTS[key]


def slot_count(kind: str) -> int:
    return max(1, len(visible_gpus())) if kind == "cuda" else 1
