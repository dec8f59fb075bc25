"""`python -m evokernel.evaluate.worker FD CONFINEMENT_JSON`: a worker process.

Started by `process.launch.WorkerProcess` in a fresh interpreter and its own session; FD is its
end of the private channel. Its first acts, before torch or any thread exists: ask the kernel
to kill it if the parent dies, and enter the sandbox (process/confine.py; in a PID namespace
the process the parent started stays outside as a relay, and this code goes on in its child).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(1)
    sandbox: list[str] = []
    if len(argv) > 2:
        from evokernel.evaluate.process.confine import Confinement, enter

        sandbox = enter(Confinement.from_json(argv[2]))
    from evokernel.evaluate.process import channel
    from evokernel.evaluate.worker.serve import serve

    conn = channel.connect(int(argv[1]))
    with contextlib.suppress(EOFError):
        serve(conn, sandbox)
    conn.close()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
