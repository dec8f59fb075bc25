"""Hostile: starts a long-lived grandchild in a new session (named MARK, which a test makes
unique to find it), then spins forever. Expected: timeout; nothing survives."""

import subprocess

MARK = "evokernel-mark"


# EVOLVE-BLOCK-START
def _spawn():
    subprocess.Popen([MARK, "300"], executable="sleep", start_new_session=True)


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    _spawn()
    while True:
        pass
