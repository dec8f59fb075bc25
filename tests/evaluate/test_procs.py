"""The tracker of a worker's processes: with a cgroup it reads members from `cgroup.procs` once
the root has joined, and still finds processes it has seen before; without one it scans /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from evokernel.evaluate.process import procs
from evokernel.evaluate.process.cgroup import Cgroup
from evokernel.evaluate.process.procs import Tracker


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                            start_new_session=True)  # fmt: skip


def test_without_cgroup_scans_proc() -> None:
    proc = _sleeper()
    try:
        assert proc.pid in {st.pid for st in Tracker(proc.pid).members()}
    finally:
        proc.kill()
        proc.wait()


def test_cgroup_members_without_a_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _sleeper()
    other = _sleeper()  # outside the fake cgroup and its session: not a member
    inside = [proc.pid]
    try:
        tracker = Tracker(proc.pid, lambda: list(inside))
        calls = []
        real = procs.snapshot
        monkeypatch.setattr(procs, "snapshot", lambda: calls.append(1) or real())
        found = {st.pid for st in tracker.members()}
        assert found == {proc.pid}
        assert not calls, "a joined worker's members come from its cgroup, not a /proc scan"
        # A process seen once stays tracked after it leaves the list (it cannot leave a real
        # cgroup; the tracker keeps it anyway).
        inside.append(other.pid)
        assert other.pid in {st.pid for st in tracker.members()}
        inside.remove(other.pid)
        assert other.pid in {st.pid for st in tracker.members()}
    finally:
        for p in (proc, other):
            p.kill()
            p.wait()


def test_before_the_join_scans_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _sleeper()
    try:
        tracker = Tracker(proc.pid, lambda: [])  # the root is not in its cgroup yet
        calls = []
        real = procs.snapshot
        monkeypatch.setattr(procs, "snapshot", lambda: calls.append(1) or real())
        assert proc.pid in {st.pid for st in tracker.members()}
        assert calls
    finally:
        proc.kill()
        proc.wait()


def test_real_cgroup_kill_all() -> None:
    group = Cgroup.create()
    if group is None:
        pytest.skip("no writable cgroup v2 hierarchy on this machine")
    code = (
        f"import os, subprocess, sys, time\n"
        f"open({os.path.join(group.path, 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        f"time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        tracker = Tracker(proc.pid, group.pids)
        deadline = time.monotonic() + 10
        while len(tracker.members()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        members = tracker.members()
        assert len(members) == 2 and proc.pid in {st.pid for st in members}
        tracker.kill_all(grace_s=0.2)
        proc.wait(timeout=5)
        assert not tracker.members()
    finally:
        proc.kill()
        proc.wait()
        group.remove()
