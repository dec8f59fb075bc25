"""A small candidate file for the mutator tests: softmax attention of one query per head, and a
scaled copy, each a Triton kernel with declared knobs. Runs under the Triton interpreter."""

import torch
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
BLOCK_N = 16  # tune: 8, 16, 32, 64
NUM_WARPS = 4  # tune: 1, 2, 4, 8
BLOCK = 64  # tune: 32, 64, 128
NUM_STAGES = 2  # tune: 1, 2, 3


@triton.jit
def _attend(q_ptr, k_ptr, v_ptr, out_ptr, n, scale, D: tl.constexpr, BLOCK_N: tl.constexpr):
    h = tl.program_id(0)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + h * D + offs_d).to(tl.float32)
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([D], dtype=tl.float32)
    for n0 in range(0, n, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < n
        kv = h * n * D + offs_n[:, None] * D + offs_d[None, :]
        k = tl.load(k_ptr + kv, mask=mask_n[:, None], other=0.0)
        s = tl.sum(k * q[None, :], axis=1) * scale
        s = tl.where(mask_n, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        v = tl.load(v_ptr + kv, mask=mask_n[:, None], other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    tl.store(out_ptr + h * D + offs_d, acc / l_i)


@triton.jit
def _scaled_copy(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * alpha, mask=mask)


def _launch_attend(q, k, v, scale):
    H, D = q.shape
    out = torch.empty_like(q)
    _attend[(H,)](
        q,
        k,
        v,
        out,
        k.shape[1],
        scale,
        D=D,
        BLOCK_N=BLOCK_N,
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )
    return out


def _launch_copy(x, alpha):
    y = torch.empty_like(x)
    _scaled_copy[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), alpha, BLOCK=BLOCK)
    return y


# EVOLVE-BLOCK-END


def attend(q, k, v, scale):
    """q [H, D], k and v [H, N, D] float32 -> softmax(q k^T * scale) v, [H, D]."""
    return _launch_attend(q.contiguous(), k.contiguous(), v.contiguous(), float(scale))


def scaled_copy(x, alpha):
    """x * alpha for a contiguous float32 tensor."""
    return _launch_copy(x.contiguous(), float(alpha))
