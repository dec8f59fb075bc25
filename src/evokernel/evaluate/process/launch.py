"""One worker process, and everything that keeps the evaluator safe from it.

`WorkerProcess` starts `python -m evokernel.evaluate.worker` as a fresh interpreter (nothing of
the parent is inherited) in its own session and in the OS sandbox (policy.py decides what it
may do, the worker enters it first thing: confine.py), with:

  * a private scratch directory (temp files, HOME, Triton cache, torch extensions,
    stdout/stderr captures), removed on `close()`;
  * a scrubbed environment (policy.child_env);
  * a cgroup of its own where the system allows one;
  * the parent's end of a socket pair as the only result channel (channel.py, protocol.py);
  * a monitor thread that enforces the wall-clock deadline, the host-memory budget (RSS summed
    over every process of the worker, polled; RLIMIT_AS is unusable next to CUDA) and the disk
    budget, and on a breach kills the whole process tree (SIGTERM, then SIGKILL).

`request(message, kinds)` returns the worker's reply (a `protocol` message of one of `kinds`)
or raises `WorkerGone` carrying the reason line: the monitor's verdict (`timeout`,
`memory-budget`), a signal death (`crashed: SIGSEGV`), an exit without a reply (`no-result`) or
a broken protocol (`no-result: protocol broken: ...`, with what was wrong). `close()` always
leaves no process behind, and so does an interrupt (`abort_all`, an atexit hook).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar, overload

from evokernel.evaluate import protocol
from evokernel.evaluate.process import channel, policy
from evokernel.evaluate.process.cgroup import Cgroup
from evokernel.evaluate.process.procs import Tracker
from evokernel.reasons import reason

A = TypeVar("A", bound=protocol.Message)
B = TypeVar("B", bound=protocol.Message)
C = TypeVar("C", bound=protocol.Message)

_POLL_S = 0.05
_DISK_EVERY_S = 1.0
_TAIL = 4000


_LIVE: set[WorkerProcess] = set()  # every worker not yet closed, for interrupts and exit
_LIVE_LOCK = threading.Lock()
# Scratch directories of workers still starting (not yet in _LIVE): a daemon thread starting
# a worker when the interpreter exits never finishes, so exit removes these too.
_STARTING: set[Path] = set()
_EXITING = threading.Event()  # set at interpreter exit: no worker starts after it


def abort_all(line: str) -> None:
    """Kill every live worker's processes now (their pending requests fail with `line`); their
    owners then close them as usual. Used when the evaluator is interrupted."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for worker in live:
        worker._breach(line)


@atexit.register
def _close_all() -> None:
    """At interpreter exit (also after an interrupt): no worker process and no scratch
    directory is left behind."""
    with _LIVE_LOCK:
        _EXITING.set()
        live = list(_LIVE)
        starting = list(_STARTING)
    for worker in live:
        worker.close()
    for path in starting:
        shutil.rmtree(path, ignore_errors=True)


class _Spawner:
    """Starts every worker process from one thread that lives as long as the evaluator: the
    kernel's parent-death signal (PR_SET_PDEATHSIG) fires when the *thread* that forked the
    child exits, so a worker started from a short-lived thread (the pool's) would be killed
    with it."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[subprocess.Popen[bytes]], dict[str, Any]]]
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def popen(self, **kwargs: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="evokernel-spawner", daemon=True
                )
                self._thread.start()
        future: Future[subprocess.Popen[bytes]] = Future()
        self._queue.put((future, kwargs))
        return future.result()

    def _serve(self) -> None:
        while True:
            future, kwargs = self._queue.get()
            try:
                future.set_result(subprocess.Popen(**kwargs))
            except BaseException as err:
                future.set_exception(err)


_SPAWNER = _Spawner()


class WorkerGone(Exception):
    """The worker cannot answer any more; `line` is the reason (a `reason()` string)."""

    def __init__(self, line: str, infrastructure: bool = False) -> None:
        super().__init__(line)
        self.line = line
        self.infrastructure = infrastructure


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _TAIL))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class WorkerProcess:
    """A spawned worker process with its limits. Use as a context manager.

    device "cpu" runs Triton under its interpreter, "cuda" compiles; None keeps the parent's
    TRITON_INTERPRET as it is (run_isolated)."""

    def __init__(
        self,
        *,
        device: str | None,
        memory_mb: int,
        disk_mb: int,
        env: dict[str, str] | None = None,
        cuda_visible: str | None = None,
        threads: int = 1,
        cwd: str | None = None,
        read: tuple[str, ...] = (),
        write: tuple[str, ...] = (),
    ) -> None:
        with _LIVE_LOCK:
            if _EXITING.is_set():
                raise WorkerGone(reason("infrastructure", "the evaluator is shutting down"), True)
            self.dir = Path(tempfile.mkdtemp(prefix="evokernel-eval-"))
            _STARTING.add(self.dir)
        self.cgroup: Cgroup | None = None
        self._closed = False
        self._close_lock = threading.Lock()
        try:
            self._start(device, memory_mb, disk_mb, env, cuda_visible, threads, cwd, read, write)
        except BaseException:  # an interrupt while starting, too: leave nothing behind
            with _LIVE_LOCK:
                _STARTING.discard(self.dir)
            proc = getattr(self, "proc", None)
            if proc is not None:
                self._stop.set()
                Tracker(proc.pid).kill_all(grace_s=0.0)
                proc.wait()
            if self.cgroup is not None:
                self.cgroup.remove()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        with _LIVE_LOCK:
            _STARTING.discard(self.dir)
            exiting = _EXITING.is_set()
            if not exiting:
                _LIVE.add(self)
        if exiting:  # started while the interpreter exits: nobody would close it
            self.close()
            raise WorkerGone(reason("infrastructure", "the evaluator is shutting down"), True)

    def _start(
        self,
        device: str | None,
        memory_mb: int,
        disk_mb: int,
        env: dict[str, str] | None,
        cuda_visible: str | None,
        threads: int,
        cwd: str | None,
        read: tuple[str, ...],
        write: tuple[str, ...],
    ) -> None:
        uid = policy.drop_uid()
        for sub in ("tmp", "triton", "torch_extensions", "home"):
            (self.dir / sub).mkdir()
        if uid is not None:  # the worker runs as nobody: its scratch space is its own
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, uid, uid)
        self.memory_bytes = memory_mb * 2**20
        self.disk_bytes = disk_mb * 2**20
        self.deadline: float | None = None
        self.deadline_line = ""
        self.verdict: str | None = None
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.peak_rss = 0

        if device is None:  # run_isolated: the Triton mode of the parent's environment
            interpret = os.environ.get("TRITON_INTERPRET")
        else:
            interpret = "1" if device == "cpu" else None
        self.env = policy.child_env(
            self.dir, triton_interpret=interpret, threads=threads, extra=env
        )
        if cuda_visible is not None:
            self.env["CUDA_VISIBLE_DEVICES"] = cuda_visible
        self.cgroup = Cgroup.create()
        skip = policy.broken_layers(device)
        conf = policy.confinement(
            str(self.dir),
            env=self.env,
            read=(*read, *([cwd] if cwd else [])),
            write=write,
            cgroup=self.cgroup.path if self.cgroup else None,
            fsize_bytes=self.disk_bytes,
            skip=skip,
        )

        self.conn, child_sock = channel.socket_pair()
        self.stdout_path = self.dir / "stdout.txt"
        self.stderr_path = self.dir / "stderr.txt"
        fd = child_sock.fileno()
        cmd = [sys.executable, "-m", "evokernel.evaluate.worker", str(fd), conf.to_json()]
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = _SPAWNER.popen(
                args=cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=(fd,),
                start_new_session=True,
                cwd=cwd or str(self.dir),
                env=self.env,
            )
        child_sock.close()
        self.tracker = Tracker(self.proc.pid, self.cgroup.pids if self.cgroup else None)
        self.core = {self.proc.pid}
        self._monitor = threading.Thread(target=self._watch, name="evokernel-monitor", daemon=True)
        self._monitor.start()

    # --- limits ------------------------------------------------------------------------------
    def set_deadline(self, seconds: float, line: str) -> None:
        """From now, `seconds` of wall time; on expiry the tree is killed with reason `line`."""
        with self._lock:
            self.deadline = time.monotonic() + seconds
            self.deadline_line = line

    def clear_deadline(self) -> None:
        with self._lock:
            self.deadline = None

    def _breach(self, line: str) -> None:
        with self._lock:
            if self.verdict is None:
                self.verdict = line
        self.tracker.kill_all()

    def _watch(self) -> None:
        next_disk = 0.0
        while not self._stop.wait(_POLL_S):
            now = time.monotonic()
            with self._lock:
                deadline, line = self.deadline, self.deadline_line
            if deadline is not None and now > deadline:
                self._breach(line)
                return
            rss = self.tracker.rss_bytes()
            self.peak_rss = max(self.peak_rss, rss)
            if rss > self.memory_bytes:
                self._breach(
                    reason(
                        "memory-budget",
                        f"host memory {rss / 2**20:.0f} MiB over the budget of "
                        f"{self.memory_bytes / 2**20:.0f} MiB; processes killed",
                    )
                )
                return
            if now >= next_disk:
                next_disk = now + _DISK_EVERY_S
                used = _dir_bytes(self.dir)
                if used > self.disk_bytes:
                    self._breach(
                        reason(
                            "memory-budget",
                            f"disk: {used / 2**20:.0f} MiB written, budget "
                            f"{self.disk_bytes / 2**20:.0f} MiB; processes killed",
                        )
                    )
                    return
            if self.proc.poll() is not None and not self.tracker.members():
                return

    # --- talking -----------------------------------------------------------------------------
    def _gone(self, detail: str = "") -> WorkerGone:
        """Why the worker cannot answer: the monitor's verdict, a signal, or a bare exit."""
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.tracker.kill_all()
            rc = self.proc.wait()
        if self.verdict is not None:
            return WorkerGone(self.verdict)
        if rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = f"signal {-rc}"
            return WorkerGone(reason("crashed", f"worker died from {name}"))
        extra = f" ({detail})" if detail else ""
        return WorkerGone(
            reason("no-result", f"worker exited with status {rc} and no result{extra}")
        )

    @overload
    def recv(self, kinds: tuple[type[A]]) -> A: ...
    @overload
    def recv(self, kinds: tuple[type[A], type[B]]) -> A | B: ...
    @overload
    def recv(self, kinds: tuple[type[A], type[B], type[C]]) -> A | B | C: ...
    def recv(self, kinds: tuple[type[protocol.Message], ...]) -> protocol.Message:
        """The next message, one of `kinds` (anything else breaks the protocol)."""
        while True:
            if self.verdict is not None:
                raise self._gone()
            try:
                ready = self.conn.poll(_POLL_S)
            except OSError:
                raise self._gone() from None
            if ready:
                try:
                    reply = protocol.recv(self.conn, kinds, protocol.MAX_REPLY_BYTES)
                    if isinstance(reply, protocol.Ready):
                        self._note_core()
                    return reply
                except EOFError:
                    raise self._gone() from None
                except channel.ChannelError as err:
                    self._breach(reason("no-result", f"protocol broken: {err}"))
                    raise self._gone() from None
            if self.proc.poll() is not None and not self.conn.poll(0):
                raise self._gone()

    def send(self, message: protocol.Message) -> None:
        try:
            protocol.send(self.conn, message)
        except OSError:
            raise self._gone() from None

    @overload
    def request(self, message: protocol.Message, kinds: tuple[type[A]]) -> A: ...
    @overload
    def request(self, message: protocol.Message, kinds: tuple[type[A], type[B]]) -> A | B: ...
    @overload
    def request(
        self, message: protocol.Message, kinds: tuple[type[A], type[B], type[C]]
    ) -> A | B | C: ...
    def request(
        self, message: protocol.Message, kinds: tuple[type[protocol.Message], ...]
    ) -> protocol.Message:
        self.send(message)
        return self.recv(kinds)  # type: ignore[arg-type]

    def _note_core(self) -> None:
        """The worker's own processes, once its trusted set-up is done: the process we started
        and, in a PID namespace, its one child (the worker proper, init of the namespace)."""
        members = self.tracker.members()
        self.core = {self.proc.pid} | {st.pid for st in members if st.ppid == self.proc.pid}

    def extra_processes(self) -> list[int]:
        """Live processes of the worker's tree other than the worker itself."""
        return [st.pid for st in self.tracker.members() if st.pid not in self.core]

    # --- ending ------------------------------------------------------------------------------
    def tails(self) -> dict[str, str]:
        """The last bytes of the worker's stdout and stderr, without the parent's secrets."""
        return {
            "stdout_tail": policy.redact(_tail(self.stdout_path), self.env),
            "stderr_tail": policy.redact(_tail(self.stderr_path), self.env),
        }

    def close(self, harvest: Callable[[Path], object] | None = None) -> dict[str, str]:
        """End the worker and everything it started; remove its directory. Returns the
        stdout/stderr tails. `harvest(scratch)` runs when no process of the worker is left and
        before the directory goes (the compile cache takes what it may keep). Safe to call
        more than once and from several threads."""
        with self._close_lock:
            if self._closed:
                return {"stdout_tail": "", "stderr_tail": ""}
            tails = self._close(harvest)
            self._closed = True
        with _LIVE_LOCK:
            _LIVE.discard(self)
        return tails

    def _close(self, harvest: Callable[[Path], object] | None) -> dict[str, str]:
        if self.proc.poll() is None and self.verdict is None:
            try:
                protocol.send(self.conn, protocol.Exit())
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.tracker.kill_all(grace_s=0.5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._stop.set()
        self._monitor.join()
        self.tracker.kill_all(grace_s=0.0)
        if self.cgroup is not None:
            self.cgroup.remove()
        self.conn.close()
        tails = self.tails()
        if harvest is not None:
            with contextlib.suppress(OSError):  # a cache that keeps nothing is still correct
                harvest(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        return tails

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
