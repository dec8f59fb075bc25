"""Hostile: dereferences a null pointer. Expected: crashed (SIGSEGV) (static check: static)."""

import ctypes


# EVOLVE-BLOCK-START
def _attend(q):
    return ctypes.string_at(0)


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q)
