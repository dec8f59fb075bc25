"""A real `evokernel serve` process on 127.0.0.1 for the tests, and proof that it left nothing.

    with ServerProcess(["--model", str(ckpt), "--max-batch", "8"]) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
        ...
    # leaving the block stops it (SIGTERM) and asserts: exit code 0, no process left of its
    # tree, the port free again

The port is 0 (any free one); the server's ready line names the one it took. Its stderr goes to
a file (`server.log()`), so a test can check what it printed.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MAX_LEN = 512  # the context of the shared test server
READY = re.compile(r"^serving \S+ on http://127\.0\.0\.1:(\d+) ")


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def port_free(port: int) -> bool:
    with socket.socket() as s:
        # as a restarted server binds: connections it closed may linger in TIME_WAIT
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class ServerProcess:
    def __init__(
        self, args: list[str], env: dict[str, str] | None = None, device: str = "cpu"
    ) -> None:
        self.args = args
        self.device = device
        # One intra-op thread: the tiny model's ops are too small to share, and on a loaded
        # 2-core machine OpenMP's spinning threads would slow every step down many times.
        base = {"OMP_NUM_THREADS": "1"} | dict(os.environ)
        self.env = {**base, **(env or {}), "PYTHONUNBUFFERED": "1"}
        self._log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115
        self.stdout: list[str] = []
        self.port = 0
        self.tree: set[int] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> ServerProcess:
        cmd = [sys.executable, "-m", "evokernel", "serve", "--port", "0", "--device", self.device]
        self.proc = subprocess.Popen(
            [*cmd, *self.args],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=self.env,
        )
        ready = threading.Event()
        threading.Thread(target=self._read, args=(ready,), daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"the server did not start:\n{self.log()}")
        self.tree = descendants(self.proc.pid)
        return self

    def _read(self, ready: threading.Event) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout.append(line)
            found = READY.match(line)
            if found:
                self.port = int(found[1])
                ready.set()

    def log(self) -> str:
        self._log.flush()
        return Path(self._log.name).read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        """Signal the server, wait for it, and check it left no process and no open port."""
        self.tree |= descendants(self.proc.pid)
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout_s)
        deadline = time.monotonic() + 10
        while any(alive(p) for p in self.tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [p for p in self.tree if alive(p)]
        assert not left, f"processes left behind: {left}"
        assert port_free(self.port), f"port {self.port} still taken"
        return code

    def kill(self) -> None:
        tree = self.tree | descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pid in tree:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            if self.proc.poll() is None and exc[0] is None:
                assert self.stop() == 0, self.log()
        finally:
            self.kill()
            os.unlink(self._log.name)
