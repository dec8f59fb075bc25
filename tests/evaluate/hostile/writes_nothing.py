"""Hostile: launches a Triton kernel that reads its inputs but never stores the output.
Expected: not-finite (the output buffer is poisoned before the call)."""

import torch
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
@triton.jit
def _touch(q_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(q_ptr + offs, mask=offs < n, other=0.0)
    x = x * 2.0


def _attend(q):
    out = torch.empty_like(q)
    n = q.numel()
    _touch[(triton.cdiv(n, 256),)](q, n, BLOCK=256)
    return out


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q)
