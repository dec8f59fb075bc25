"""One cgroup (v2) per worker, where the system lets us make one: every process the candidate
starts is in it, whatever session or process group it moves to, and `cgroup.kill` ends them all
in one step. Parent side.

The cgroup is made below the evaluator's own cgroup (or the v2 root), named after the
evaluator's pid and a counter; the worker joins it itself as its first act (confine.py), before
it can start anything. Without a writable cgroup v2 hierarchy (a container with a read-only
/sys/fs/cgroup, an unprivileged user without delegation) `create()` returns None and the other
layers (process group kept by seccomp, PID namespace, the tracker) do the work.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time

_COUNTER = itertools.count()
_LOCK = threading.Lock()
_BASE: list[str | None] = []


def _v2_mount() -> str | None:
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return left.split()[4]
    except OSError:
        return None
    return None


def _own_path() -> str:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return "/"


def _base() -> str | None:
    """A writable cgroup v2 directory to make worker cgroups in (cached), or None."""
    with _LOCK:
        if _BASE:
            return _BASE[0]
        found = None
        mount = _v2_mount()
        if mount is not None:
            for rel in (_own_path(), "/"):
                path = os.path.normpath(os.path.join(mount, rel.lstrip("/")))
                probe = os.path.join(path, f"evokernel-probe-{os.getpid()}")
                try:
                    os.mkdir(probe)
                    ok = os.path.exists(os.path.join(probe, "cgroup.kill"))
                    os.rmdir(probe)
                except OSError:
                    continue
                if ok:
                    found = path
                    break
        _BASE.append(found)
        return found


class Cgroup:
    """A worker's cgroup; `create()` gives None where none can be made."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls) -> Cgroup | None:
        base = _base()
        if base is None:
            return None
        path = os.path.join(base, f"evokernel-{os.getpid()}-{next(_COUNTER)}")
        try:
            os.mkdir(path)
        except OSError:
            return None
        return cls(path)

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def kill(self) -> None:
        """SIGKILL to every process in the cgroup (the kernel leaves none out)."""
        with contextlib.suppress(OSError), open(os.path.join(self.path, "cgroup.kill"), "w") as f:
            f.write("1")

    def remove(self, wait_s: float = 5.0) -> None:
        """Kill what is left, wait for it to be gone, remove the directory."""
        deadline = time.monotonic() + wait_s
        while True:
            self.kill()
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)
