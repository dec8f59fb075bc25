"""Decode GEMV kernels on packed weights (FP8 blocks, 4- and 8-bit integers), fused as the
bf16 kernels of kernels/gemv.py are, with the same rounding.

A decode step reads every weight once, so the packed bytes are the floor: program p owns
BLOCK_N output rows and the whole K, and loads its rows' packed bytes (and their scales and
zero points) in one go, as a tile indexed [row, group, ...] so that each group's scale is a
[BLOCK_N, NG] tile applied once per group, *before* the PDL wait (the weights stream in while
the previous kernel finishes). Only then does it read the activations. Weights are loaded
with `evict_first`: read once per step, they must not push the activations out of L2.

Weight layouts (model/quant/packed.py; NG, GW, GS padded to powers of two, masked):
  FP8   q  float8e4nv [BLOCK_N, NG, GS]  column g*GS + c; GS = the block's columns
        s  float32    [BLOCK_N, NG]      row r's scale row is r // SCALE_ROWS
        y[r] = sum_g s[r, g] * sum_c float(q[r, g, c]) * x[g*GS + c]
  INT   q  int32      [BLOCK_N, NG, GW]  word g*GWR + j of the row (GWR = GS / P real words
                                         per group), holding columns (g*GWR + j)*P + i,
                                         i < P = 32 / BITS, at bits [i*BITS, (i+1)*BITS)
        s  [BLOCK_N, NG] (any float), z uint8 [BLOCK_N, NG] (HAS_Z) + ZOFF, else 2**(BITS-1)
        y[r] = sum_g s[r, g] * (sum_{j,i} q[r,g,j,i] * x[k] - z[r, g] * sum_{j,i} x[k])
        with k = perm[(g*GWR + j)*P + i] when HAS_PERM (act-order), else the index itself:
        the zero point costs one product per group, not one per weight. The values are
        taken one bit position i at a time (P passes over the packed tile, each with x at
        that position's columns), so every tensor keeps the packed tile's layout and the
        products accumulate elementwise before a single reduction per group.

Every product is float32 on the CUDA cores: float(q) and the scale are exact in float32, so
the result is the float32 product with `dequantize(float32)` up to summation order.

  quant_norm_gemv_kernel     y = round(W @ rms_norm(x) [+ bias])   (qkv; NORM=False: linear)
  quant_gemv_add_kernel      res += round(W @ x), in place          (o_proj, down_proj)
  quant_norm_gate_up_kernel  act = silu(round(Wg @ n)) * round(Wu @ n), rounded as gemv.py
  quant_norm_head_kernel     logits = round(W @ rms_norm(x)) as float32, and/or each
                             program's argmax folded into one int64 key per row (gemv.py
                             `argmax_key`, atomic max)

Rows per launch M (1..64) run as a loop over the weight tile held in registers.
"""

import triton
import triton.language as tl

from evokernel.kernels.gemv import head_store
from evokernel.kernels.overlap import pdl_enter


@triton.jit
def _weight_tile(
    q_ptr, s_ptr, z_ptr, rows, N, stride_q, stride_s, stride_z,
    K: tl.constexpr, FP8: tl.constexpr, BITS: tl.constexpr, GS: tl.constexpr,
    NG: tl.constexpr, GW: tl.constexpr, SCALE_ROWS: tl.constexpr, HAS_Z: tl.constexpr,
):  # fmt: skip
    """(q, s, z, idx, valid): the packed tile, its scales and zero points [BLOCK_N, NG], and
    the index of each tile element along K with its mask: FP8 the column [NG, GS], INT the
    word [NG, GW] (its values are columns idx * P + i)."""
    NGR: tl.constexpr = (K + GS - 1) // GS  # real groups
    r2 = rows[:, None]
    g2 = tl.arange(0, NG)[None, :]
    smask = (r2 < N) & (g2 < NGR)
    g = tl.arange(0, NG)[:, None]
    if FP8:
        idx = g * GS + tl.arange(0, GS)[None, :]  # [NG, GS]
        valid = idx < K
        other = 0.0
        s = tl.load(s_ptr + (r2 // SCALE_ROWS) * stride_s + g2, mask=smask, other=0.0)
    else:
        P: tl.constexpr = 32 // BITS
        GWR: tl.constexpr = GS // P  # real words per group
        KW: tl.constexpr = (K + P - 1) // P  # real words per row
        j = tl.arange(0, GW)[None, :]
        idx = g * GWR + j  # [NG, GW]
        valid = (j < GWR) & (idx < KW)
        other = 0
        s = tl.load(s_ptr + r2.to(tl.int64) * stride_s + g2, mask=smask, other=0.0)
    ptrs = q_ptr + r2[:, :, None].to(tl.int64) * stride_q + idx[None, :, :]
    q = tl.load(
        ptrs, mask=(r2[:, :, None] < N) & valid[None, :, :], other=other,
        eviction_policy="evict_first",
    )  # fmt: skip
    if HAS_Z:
        z = tl.load(z_ptr + r2.to(tl.int64) * stride_z + g2, mask=smask, other=0)
    else:
        z = s
    return q, s, z, idx, valid


@triton.jit
def _rstd(x_ptr, eps, K: tl.constexpr, BLOCK_K: tl.constexpr, NORM: tl.constexpr):
    """1 / RMS of one activation row (1.0 without NORM)."""
    rstd = 1.0
    if NORM:
        flat = tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + flat, mask=flat < K, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / K + eps)
    return rstd


@triton.jit
def _x_at(x_ptr, norm_ptr, k, valid, rstd, NORM: tl.constexpr):
    """The activation row at columns `k` (any shape), float32; with NORM the RMS-normalised
    values rounded as transformers rounds (to the dtype before and after the norm weight)."""
    x = tl.load(x_ptr + k, mask=valid, other=0.0).to(tl.float32)
    if NORM:
        dtype = x_ptr.dtype.element_ty
        w = tl.load(norm_ptr + k, mask=valid, other=0.0).to(tl.float32)
        x = ((x * rstd).to(dtype).to(tl.float32) * w).to(dtype).to(tl.float32)
    return x


@triton.jit
def _dot(
    q, s, z, idx, valid, x_ptr, norm_ptr, p_ptr, rstd,
    K: tl.constexpr, FP8: tl.constexpr, BITS: tl.constexpr, HAS_Z: tl.constexpr,
    ZOFF: tl.constexpr, HAS_PERM: tl.constexpr, NORM: tl.constexpr,
):  # fmt: skip
    """sum_k W[r, k] x[k] for each row r of the tile, x the row at `x_ptr` (normalised with
    NORM): [BLOCK_N] float32."""
    if FP8:
        x = _x_at(x_ptr, norm_ptr, idx, valid, rstd, NORM)  # [NG, GS]
        part = tl.sum(q.to(tl.float32) * x[None, :, :], axis=2)  # [BLOCK_N, NG]
        y = tl.sum(part * s, axis=1)
    else:
        # One pass per value position i of a word: every tensor keeps the tile's [.., NG, GW]
        # layout (no 4-D unpacked tile), and the products accumulate before one reduction.
        P: tl.constexpr = 32 // BITS
        acc = tl.zeros(q.shape, tl.float32)
        xs = tl.zeros(idx.shape, tl.float32)
        for i in tl.static_range(P):
            k = idx * P + i
            m = valid & (k < K)
            if HAS_PERM:
                k = tl.load(p_ptr + k, mask=m, other=0)
            x = _x_at(x_ptr, norm_ptr, k, m, rstd, NORM)  # [NG, GW]
            v = ((q >> (i * BITS)) & ((1 << BITS) - 1)).to(tl.float32)
            acc += v * x[None, :, :]
            xs += x
        qx = tl.sum(acc, axis=2)  # [BLOCK_N, NG]: sum of q * x per group
        xsum = tl.sum(xs, axis=1)  # [NG]: sum of x per group, for the zero points
        if HAS_Z:
            zp = z.to(tl.float32) + ZOFF
        else:
            zp = tl.full(s.shape, 1 << (BITS - 1), tl.float32)
        y = tl.sum(s.to(tl.float32) * (qx - zp * xsum[None, :]), axis=1)
    return y


@triton.jit
def quant_norm_gemv_kernel(
    x_ptr,  # [M, K]
    norm_ptr,  # [K] RMSNorm weight (NORM only)
    q_ptr, s_ptr, z_ptr, p_ptr,  # the packed weight [N, K] (see the module docstring)
    bias_ptr,  # [N] (HAS_BIAS only)
    y_ptr,  # [M, N]
    M, N, stride_x, stride_q, stride_s, stride_z, stride_y, eps,
    K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FP8: tl.constexpr,
    BITS: tl.constexpr, GS: tl.constexpr, NG: tl.constexpr, GW: tl.constexpr,
    SCALE_ROWS: tl.constexpr, HAS_Z: tl.constexpr, ZOFF: tl.constexpr,
    HAS_PERM: tl.constexpr, NORM: tl.constexpr, HAS_BIAS: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    q, s, z, idx, valid = _weight_tile(
        q_ptr, s_ptr, z_ptr, rows, N, stride_q, stride_s, stride_z,
        K, FP8, BITS, GS, NG, GW, SCALE_ROWS, HAS_Z,
    )  # fmt: skip
    if HAS_BIAS:
        bias = tl.load(bias_ptr + rows, mask=rows < N, other=0.0).to(tl.float32)
    pdl_enter(PDL)
    for m in range(M):
        xr = x_ptr + m * stride_x
        rstd = _rstd(xr, eps, K, BLOCK_K, NORM)
        y = _dot(q, s, z, idx, valid, xr, norm_ptr, p_ptr, rstd,
                 K, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, NORM)  # fmt: skip
        if HAS_BIAS:
            y += bias
        tl.store(y_ptr + m * stride_y + rows, y.to(y_ptr.dtype.element_ty), mask=rows < N)


@triton.jit
def quant_gemv_add_kernel(
    x_ptr,  # [M, K]
    q_ptr, s_ptr, z_ptr, p_ptr,  # the packed weight [N, K]
    res_ptr,  # [M, N] the residual stream, updated in place: res += round(W @ x)
    M, N, stride_x, stride_q, stride_s, stride_z, stride_res,
    K: tl.constexpr, BLOCK_N: tl.constexpr, FP8: tl.constexpr, BITS: tl.constexpr,
    GS: tl.constexpr, NG: tl.constexpr, GW: tl.constexpr, SCALE_ROWS: tl.constexpr,
    HAS_Z: tl.constexpr, ZOFF: tl.constexpr, HAS_PERM: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    q, s, z, idx, valid = _weight_tile(
        q_ptr, s_ptr, z_ptr, rows, N, stride_q, stride_s, stride_z,
        K, FP8, BITS, GS, NG, GW, SCALE_ROWS, HAS_Z,
    )  # fmt: skip
    pdl_enter(PDL)
    dtype = res_ptr.dtype.element_ty
    for m in range(M):
        # The residual is loaded with x, before the reduction: both L2 round trips overlap.
        res_rows = res_ptr + m * stride_res + rows
        r = tl.load(res_rows, mask=rows < N, other=0.0).to(tl.float32)
        y = _dot(q, s, z, idx, valid, x_ptr + m * stride_x, x_ptr, p_ptr, 1.0,
                 K, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, False)  # fmt: skip
        tl.store(res_rows, (r + y.to(dtype).to(tl.float32)).to(dtype), mask=rows < N)


@triton.jit
def quant_norm_gate_up_kernel(
    x_ptr,  # [M, K]
    norm_ptr,  # [K]
    q_ptr, s_ptr, z_ptr, p_ptr,  # the packed weight [2I, K]: gate rows 0..I-1, up I..2I-1
    act_ptr,  # [M, I] out: silu(gate) * up
    M, I, stride_x, stride_q, stride_s, stride_z, stride_act, eps,
    K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FP8: tl.constexpr,
    BITS: tl.constexpr, GS: tl.constexpr, NG: tl.constexpr, GW: tl.constexpr,
    SCALE_ROWS: tl.constexpr, HAS_Z: tl.constexpr, ZOFF: tl.constexpr,
    HAS_PERM: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    live = rows < I
    # The up rows are the gate rows + I; past I both tiles are masked (row 2I is out).
    up_rows = tl.where(live, rows + I, 2 * I)
    qg, sg, zg, idx, valid = _weight_tile(
        q_ptr, s_ptr, z_ptr, rows, I, stride_q, stride_s, stride_z,
        K, FP8, BITS, GS, NG, GW, SCALE_ROWS, HAS_Z,
    )  # fmt: skip
    qu, su, zu, idx, valid = _weight_tile(
        q_ptr, s_ptr, z_ptr, up_rows, 2 * I, stride_q, stride_s, stride_z,
        K, FP8, BITS, GS, NG, GW, SCALE_ROWS, HAS_Z,
    )  # fmt: skip
    pdl_enter(PDL)
    dtype = act_ptr.dtype.element_ty
    for m in range(M):
        xr = x_ptr + m * stride_x
        rstd = _rstd(xr, eps, K, BLOCK_K, True)
        g = _dot(qg, sg, zg, idx, valid, xr, norm_ptr, p_ptr, rstd,
                 K, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, True)  # fmt: skip
        u = _dot(qu, su, zu, idx, valid, xr, norm_ptr, p_ptr, rstd,
                 K, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, True)  # fmt: skip
        g = g.to(dtype).to(tl.float32)
        u = u.to(dtype).to(tl.float32)
        silu = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
        tl.store(act_ptr + m * stride_act + rows, (silu * u).to(dtype), mask=live)


@triton.jit
def quant_norm_head_kernel(
    x_ptr,  # [M, K] the residual stream after the last layer
    norm_ptr,  # [K] final norm weight
    q_ptr, s_ptr, z_ptr, p_ptr,  # the packed lm_head [V, K]
    key_ptr,  # [M] int64: atomic max of argmax_key over this launch's rows (ARGMAX only)
    logits_ptr,  # [M, V] float32 out (WRITE_LOGITS only)
    M, V, stride_x, stride_q, stride_s, stride_z, stride_logits, eps,
    K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FP8: tl.constexpr,
    BITS: tl.constexpr, GS: tl.constexpr, NG: tl.constexpr, GW: tl.constexpr,
    SCALE_ROWS: tl.constexpr, HAS_Z: tl.constexpr, ZOFF: tl.constexpr,
    HAS_PERM: tl.constexpr, WRITE_LOGITS: tl.constexpr, ARGMAX: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    q, s, z, idx, valid = _weight_tile(
        q_ptr, s_ptr, z_ptr, rows, V, stride_q, stride_s, stride_z,
        K, FP8, BITS, GS, NG, GW, SCALE_ROWS, HAS_Z,
    )  # fmt: skip
    pdl_enter(PDL)
    dtype = x_ptr.dtype.element_ty
    for m in range(M):
        xr = x_ptr + m * stride_x
        rstd = _rstd(xr, eps, K, BLOCK_K, True)
        logit = _dot(q, s, z, idx, valid, xr, norm_ptr, p_ptr, rstd,
                     K, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, True)  # fmt: skip
        logit = logit.to(dtype).to(tl.float32)
        head_store(logit, pid * BLOCK_N, rows, V, logits_ptr + m * stride_logits, key_ptr + m,
                   WRITE_LOGITS, ARGMAX)  # fmt: skip
