"""The process table, read from /proc: who belongs to a worker, how much memory it holds, and
how to end all of it.

A worker runs in its own session (its pid is the session and group id) and makes itself a
child subreaper, so an orphaned grandchild is re-parented to the worker instead of init.
`Tracker` remembers every process it has ever seen in the worker's session or below it (by pid
and start time, so a recycled pid is never mistaken for one of ours), which also covers a
grandchild that calls setsid() to leave the session. `kill_all` signals them all.

Where the worker has a cgroup (cgroup.py), its members are read from the cgroup's
`cgroup.procs` once the worker is seen there (it joins as its first act, before it can start
anything, and nothing it starts can leave): a few /proc reads per look instead of a scan of
every process on the machine, which the parent does many times a second per worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class ProcStat:
    pid: int
    ppid: int
    pgrp: int
    session: int
    start: int  # clock ticks after boot: with pid, a unique identity
    rss_bytes: int
    state: str


def read_stat(pid: int) -> ProcStat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(")") + 2 :].split()
    if len(fields) < 22:
        return None
    return ProcStat(
        pid=pid,
        ppid=int(fields[1]),
        pgrp=int(fields[2]),
        session=int(fields[3]),
        start=int(fields[19]),
        rss_bytes=int(fields[21]) * _PAGE,
        state=fields[0],
    )


def snapshot() -> dict[int, ProcStat]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = read_stat(int(name))
            if st is not None:
                table[st.pid] = st
    return table


def alive(pid: int, start: int) -> bool:
    st = read_stat(pid)
    return st is not None and st.start == start and st.state != "Z"


class Tracker:
    """Every process of one worker: its session, its descendants, and any seen before."""

    def __init__(self, root: int, cgroup_pids: Callable[[], list[int]] | None = None) -> None:
        self.root = root
        self.known: dict[int, int] = {}  # pid -> start time
        self._lock = threading.Lock()
        self._cgroup_pids = cgroup_pids
        self._joined = False  # the root was seen in its cgroup: read members from there
        self._in_cgroup: set[int] = set()  # the cgroup's processes at the last look

    def members(self) -> list[ProcStat]:
        with self._lock:
            return self._members()

    def _members(self) -> list[ProcStat]:
        ours = self._from_cgroup()
        table = snapshot() if ours is None else ours
        found: dict[int, ProcStat] = {}
        for st in table.values():
            mine = st.session == self.root or st.pgrp == self.root or st.pid == self.root
            if mine or st.pid in self._in_cgroup:
                found[st.pid] = st
        children: dict[int, list[int]] = {}
        for st in table.values():
            children.setdefault(st.ppid, []).append(st.pid)
        stack = list(found) or [self.root]
        while stack:
            for child in children.get(stack.pop(), []):
                if child not in found and child in table:
                    found[child] = table[child]
                    stack.append(child)
        for pid, start in self.known.items():
            seen = table.get(pid)
            if seen is not None and seen.start == start:
                found[pid] = seen
        for st in found.values():
            if st.state != "Z":
                self.known[st.pid] = st.start
        return [st for st in found.values() if st.state != "Z"]

    def _from_cgroup(self) -> dict[int, ProcStat] | None:
        """The stats of the cgroup's processes, the root and every process seen before; None
        while the root has not joined its cgroup (or there is none): scan all of /proc."""
        if self._cgroup_pids is None:
            return None
        pids = self._cgroup_pids()
        if not self._joined:
            if self.root not in pids:
                return None
            self._joined = True
        self._in_cgroup = set(pids)
        table = {}
        for pid in {self.root, *pids, *self.known}:
            st = read_stat(pid)
            if st is not None:
                table[pid] = st
        return table

    def rss_bytes(self) -> int:
        return sum(st.rss_bytes for st in self.members())

    def signal_all(self, sig: int) -> int:
        """Send `sig` to every live member; returns how many were signalled."""
        count = 0
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.root, sig)
        for st in self.members():
            try:
                os.kill(st.pid, sig)
                count += 1
            except (ProcessLookupError, PermissionError):
                pass
        return count

    def kill_all(self, grace_s: float = 1.0) -> None:
        """SIGTERM, a grace period, then SIGKILL until nothing of the worker is left."""
        if self.signal_all(signal.SIGTERM):
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and self.members():
                time.sleep(0.02)
        for _ in range(50):
            if not self.signal_all(signal.SIGKILL):
                break
            time.sleep(0.02)

    def survivors(self) -> list[int]:
        with self._lock:
            known = dict(self.known)
        return [pid for pid, start in known.items() if alive(pid, start)]
