"""Hostile: raises with lone surrogates in its message, which JSON carries to the parent as
"\\ud800" escapes; printing or storing them there would raise. Expected: exception."""


# EVOLVE-BLOCK-START
def _attend(q, k_cache, v_cache, seq_lens, scale):
    raise RuntimeError(chr(0xD800) + " no text can hold this " + chr(0xDFFF))


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q, k_cache, v_cache, seq_lens, scale)
