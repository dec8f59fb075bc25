"""The time each serving process spends in Python's garbage collector, and its heap frozen.

    settle()                    # after start-up: collect once, move every object alive now
                                # to the permanent generation (gc.freeze)
    clock = GcClock()           # from now on, the collector's pauses are summed
    clock.seconds, clock.collections

A full collection walks every tracked object; a serving process holds a large heap from
start-up on (the tokenizer's vocabulary, the model's modules, the CUDA graphs' Python
objects), so without the freeze each periodic full collection would stall the engine's loop
(the device then runs dry) or the HTTP process's event loop (every stream waits) for that
walk. Frozen objects are never walked again; what the requests allocate still is.
"""

from __future__ import annotations

import gc
import time
from typing import Any


def settle() -> None:
    gc.collect()
    gc.freeze()


class GcClock:
    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._began: float | None = None
        gc.callbacks.append(self._on_gc)

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:
            self.seconds += time.perf_counter() - self._began
            self.collections += 1
            self._began = None
