"""SIGINT and SIGTERM for long-running verbs: both become an interrupt in the main thread, so
every cleanup path (`finally`, context managers, the evaluator's process teardown) runs, and
the verb exits 130 (SIGINT) or 143 (SIGTERM), as a shell expects of a signalled process.

    catch_signals()                 # at the start of the verb, in the main thread
    ...
    except KeyboardInterrupt:
        return exit_code()          # 130 or 143
"""

from __future__ import annotations

import signal
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as an interrupt."""


_received: list[int] = []


def _handler(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    if len(_received) > 1:
        return  # already stopping: let the cleanup finish (it is bounded)
    if signum == signal.SIGTERM:
        raise Terminated
    raise KeyboardInterrupt


def catch_signals() -> None:
    """Route SIGINT and SIGTERM through `_handler` (main thread only)."""
    _received.clear()
    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)


def exit_code() -> int:
    """128 + the first signal received (130 for SIGINT, 143 for SIGTERM); 130 when none was
    seen (an interrupt raised some other way)."""
    return 128 + (_received[0] if _received else signal.SIGINT)


def name() -> str:
    return "terminated" if _received and _received[0] == signal.SIGTERM else "interrupted"
