"""Hostile: returns its input (q has the output's shape and dtype). Expected: mismatch."""


# EVOLVE-BLOCK-START
def _attend(q):
    return q


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q)
