"""A fixed pool of daemon threads that run blocking calls (LLM requests, local evaluations).

Why not `concurrent.futures.ThreadPoolExecutor`: its threads are joined at interpreter exit,
so an interrupted run would wait for every evaluation in flight to end. These threads are
daemons: a stopped run leaves at once, and what was in flight is simply not recorded (the
next `--resume` redoes it).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class DaemonThreads:
    def __init__(self, count: int, name: str):
        self._queue: queue.Queue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = (
            queue.Queue()
        )
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
            for i in range(max(1, count))
        ]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run `fn(*args)` on a free thread."""
        future: Future[Any] = Future()
        self._queue.put((future, fn, args))
        return future

    def _loop(self) -> None:
        while True:
            future, fn, args = self._queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as err:
                future.set_exception(err)
