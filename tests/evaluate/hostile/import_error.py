"""Hostile: fails at import. Expected: load."""

# EVOLVE-BLOCK-START
_TABLE = {}
_BROKEN = _TABLE["missing"]


def _attend(q, k_cache, v_cache, seq_lens, scale):
    return q


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q, k_cache, v_cache, seq_lens, scale)
