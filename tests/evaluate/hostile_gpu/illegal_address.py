"""Hostile (GPU): a Triton kernel stores far outside its buffer. Expected: cuda-error; the
worker is discarded and the next candidate gets a fresh one."""

import torch
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
@triton.jit
def _wild_store(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    far = out_ptr + offs + (1 << 40)
    tl.store(far, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def _attend(q):
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    _wild_store[(triton.cdiv(out.numel(), 256),)](out, out.numel(), BLOCK=256)
    return out.to(q.dtype)


# EVOLVE-BLOCK-END


def attention(q, k_cache, v_cache, seq_lens, scale):
    return _attend(q)
