"""Escape attempts that tests/evaluate/test_escapes.py runs through run_isolated (a generic
task's evaluator would run a program the same way). `attempt(kind, outside, port, marker)`
tries one and returns what it saw; the sandbox must make every attempt harmless."""

import os
import signal
import socket


def _ancestors():
    found, pid = [], os.getppid()
    while pid > 1:
        found.append(pid)
        try:
            with open(f"/proc/{pid}/status") as f:
                pid = int(next(line for line in f if line.startswith("PPid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            break
    return found


def attempt(kind, outside, port, marker):
    seen = []
    try:
        if kind == "shell":
            seen.append(os.system(f"touch {outside}/shell-was-here"))
        elif kind == "write":
            with open(f"{outside}/victim.txt", "w") as f:
                f.write("owned")
        elif kind == "delete":
            os.remove(f"{outside}/victim.txt")
        elif kind == "secret":
            seen.append({k: v for k, v in os.environ.items() if "SECRET" in k})
            for pid in _ancestors():
                with open(f"/proc/{pid}/environ", "rb") as f:
                    seen.append(f.read().decode(errors="replace"))
        elif kind == "connect":
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.send(b"leak")
        elif kind == "daemon":
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execvp("sleep", [marker, "300"])
                os._exit(0)
        elif kind == "kill_parent":
            for pid in _ancestors():
                os.kill(pid, signal.SIGKILL)
        elif kind == "kill_all":
            os.kill(-1, signal.SIGKILL)
    except OSError as err:
        seen.append(f"refused: {err}")
    print(f"saw {seen}")
    if kind == "secret":
        raise ValueError(f"found {seen}")
    return {"kind": kind, "seen": [str(x) for x in seen]}
