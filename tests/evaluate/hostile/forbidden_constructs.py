"""Hostile: a catalogue of constructs the static pre-check rejects. Expected: static."""

import torch


# EVOLVE-BLOCK-START
def _attend(q):
    stream = torch.cuda.Stream()
    klass = q.__class__
    eval("1 + 1")
    fn = getattr(torch, "all" + "close")
    torch.backends.cuda.matmul.allow_tf32 = True
    return q, stream, klass, fn


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q)
