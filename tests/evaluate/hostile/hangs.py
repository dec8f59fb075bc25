"""Hostile: starts a long-lived grandchild in a new session (its pid goes to the file named by
EVOKERNEL_TEST_PIDFILE), then spins forever. Expected: timeout; nothing survives."""

import os
import subprocess


# EVOLVE-BLOCK-START
def _spawn():
    path = os.environ.get("EVOKERNEL_TEST_PIDFILE")
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    if path:
        with open(path, "a") as f:
            f.write(f"{child.pid}\n")


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    _spawn()
    while True:
        pass
