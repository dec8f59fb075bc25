"""The names of the engine's accounts, shared by the engine loop (serve/scheduler.py), the
metrics it feeds (serve/metrics.py) and `bench serve`'s reading of them
(bench/serve_accounts.py); no dependencies, so a reader need not import the engine.

The loop's host phases: read messages while busy, release and compact slots, admit (prefill
launches), launch the step, wait for tokens (blocked on the device), deliver them (events),
send the message; and wait for messages with nothing to do.
"""

HOST_PHASES = ("poll", "release", "admit", "launch", "wait", "deliver", "send", "idle")
HOST_KEYS = (*HOST_PHASES, "turns")  # and the count of turns
