"""Decode GEMV kernels on packed weights (FP8 blocks, 4- and 8-bit integers), fused as the
bf16 kernels of kernels/gemv.py are, with the same rounding.

A decode step reads every weight once, so the packed bytes are the floor: program p owns
BLOCK_N output rows and the whole K, and loads its rows' packed bytes (and their scales and
zero points) in one go, as a byte tile indexed [group, row, byte] so that each group's scale
is a [NG, BLOCK_N] tile applied once per group, *before* the PDL wait (the weights stream in
while the previous kernel finishes). Only then does it read the activations. Weights are
loaded with `evict_first`: read once per step, they must not push the activations out of L2.

Weight layouts (model/quant/packed.py), read as bytes: row r is BYTES bytes, group g its bytes
g*GBR .. g*GBR+GBR-1 (GBR = GS * BITS / 8 real bytes per group of GS columns; NG groups and
GB bytes padded to powers of two, masked):
  FP8   q  float8e4nv, or uint8 with MAGIC: byte b is column b
        s  float32 [BLOCK_N, NG], row r's scale row r // SCALE_ROWS
        y[r] = sum_g s[r, g] * sum_b float(q[r, b]) * x[b]
  INT   q  uint8 (the int32 words' little-endian bytes): byte b holds columns b*VB + h,
        h < VB = 8 / BITS, at bits [h*BITS, (h+1)*BITS) (the word order of packed.py)
        s  [BLOCK_N, NG] (any float), z uint8 [BLOCK_N, NG] (HAS_Z) + ZOFF, else 2**(BITS-1)
        y[r] = sum_g s[r, g] * sum_{b,h} (q[r, b, h] - z[r, g]) * x[k]
        with k = perm[b*VB + h] when HAS_PERM (act-order), else b*VB + h: one pass per value
        position h of a byte (1 for int8, 2 for int4), each with x at its columns.

MAGIC picks how a packed value becomes a float32 without a conversion instruction (int-to-
float runs at 1/8 of the FMA rate on sm_90, and a GEMV does one per weight):
  INT   the value v is OR-ed into the mantissa of 2**23 (bits 0x4B000000 | v = 2**23 + v,
        exact) and the zero point moves by the same 2**23, so (q - z) is one exact subtract;
  FP8   the e4m3 bits are placed in float32's sign, exponent and mantissa fields (value
        2**-120 times the e4m3 value, subnormals included, exact); the activations and the
        scales are each multiplied by 2**60 so that every product stays a normal float32.
Without MAGIC the conversions are Triton's casts. Both give the same float32 values.

Every product is float32 on the CUDA cores: float(q) - z and the scale are exact in float32,
so the result is the float32 product with `dequantize(float32)` up to summation order.

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

CONVERT = tl.constexpr(0)  # DEQ: Triton's casts after the PDL wait
MAGIC_BITS = tl.constexpr(1)  # DEQ: bit placement into float32 after the wait
EARLY = tl.constexpr(2)
INTERLEAVE = tl.constexpr(3)  # DEQ: Triton's casts and the scales, before the wait (float32 tile)
TWO_23 = tl.constexpr(8388608.0)  # 2**23: float32 bits 0x4B000000
TWO_60 = tl.constexpr(1.152921504606846976e18)  # 2**60: FP8 MAGIC scales x and s by it


@triton.jit
def _weight_tile(
    q_ptr, s_ptr, z_ptr, rows, N, stride_q, stride_s, stride_z,
    K: tl.constexpr, FP8: tl.constexpr, BITS: tl.constexpr, GS: tl.constexpr,
    NG: tl.constexpr, GB: tl.constexpr, SCALE_ROWS: tl.constexpr, HAS_Z: tl.constexpr,
    ZOFF: tl.constexpr, DEQ: tl.constexpr,
):  # fmt: skip
    """(q, q1, s, z, b, valid): the packed byte tile [NG, BLOCK_N, GB], its scales and zero
    points [NG, BLOCK_N], and each tile byte's index b along the row [NG, GB] with its mask
    (`stride_q` in bytes). Groups outermost: Triton then lays a thread's registers over
    several rows of the same bytes, so each activation it prepares serves those rows.
    With DEQ == EARLY, q and q1 are the float32 weights (q - z) * s of each byte's first
    and second value (q1 is q for one value a byte), computed here, before the PDL wait."""
    NGR: tl.constexpr = (K + GS - 1) // GS  # real groups
    GBR: tl.constexpr = GS * BITS // 8  # real bytes per group
    KB: tl.constexpr = (K * BITS + 7) // 8  # real bytes per row
    r2 = rows[None, :]
    g2 = tl.arange(0, NG)[:, None]
    smask = (r2 < N) & (g2 < NGR)
    c = tl.arange(0, GB)[None, :]
    b = tl.arange(0, NG)[:, None] * GBR + c  # [NG, GB]
    valid = (c < GBR) & (b < KB)
    s = tl.load(s_ptr + (r2 // SCALE_ROWS).to(tl.int64) * stride_s + g2, mask=smask, other=0.0)
    ptrs = q_ptr + r2[:, :, None].to(tl.int64) * stride_q + b[:, None, :]
    qmask = (r2[:, :, None] < N) & valid[:, None, :]
    if q_ptr.dtype.element_ty.is_int():
        q = tl.load(ptrs, mask=qmask, other=0, eviction_policy="evict_first")
    else:  # float8
        q = tl.load(ptrs, mask=qmask, other=0.0, eviction_policy="evict_first")
    if HAS_Z:
        z = tl.load(z_ptr + r2.to(tl.int64) * stride_z + g2, mask=smask, other=0)
    else:
        z = s
    q1 = q
    if DEQ == EARLY:
        s3 = s.to(tl.float32)[:, :, None]
        if FP8:
            q = q.to(tl.float32) * s3
            q1 = q
        else:
            zp3 = _zero_points(s, z, BITS, HAS_Z, ZOFF)[:, :, None]
            v = q.to(tl.int32)
            if BITS == 8:
                q = (v.to(tl.float32) - zp3) * s3
                q1 = q
            else:
                q = ((v & 15).to(tl.float32) - zp3) * s3
                q1 = ((v >> 4).to(tl.float32) - zp3) * s3
    return q, q1, s, z, b, valid


@triton.jit
def _zero_points(s, z, BITS: tl.constexpr, HAS_Z: tl.constexpr, ZOFF: tl.constexpr):
    """Each group's zero point as float32 [NG, BLOCK_N]."""
    if HAS_Z:
        return z.to(tl.float32) + ZOFF
    return tl.full(s.shape, 1 << (BITS - 1), tl.float32)


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
    q, q1, s, z, b, valid, x_ptr, norm_ptr, p_ptr, rstd,
    K: tl.constexpr, GS: tl.constexpr, FP8: tl.constexpr, BITS: tl.constexpr, HAS_Z: tl.constexpr,
    ZOFF: tl.constexpr, HAS_PERM: tl.constexpr, NORM: tl.constexpr, DEQ: tl.constexpr,
):  # fmt: skip
    """sum_k W[r, k] x[k] for each row r of the tile (`_weight_tile`'s q, q1, s, z, b,
    valid), x the row at `x_ptr` (normalised with NORM): [BLOCK_N] float32."""
    sf = s.to(tl.float32)
    MAGIC: tl.constexpr = DEQ == MAGIC_BITS
    if DEQ == EARLY:  # the weights are float32 already: the bf16 kernels' products
        VBE: tl.constexpr = 1 if FP8 else 8 // BITS
        part = tl.zeros(s.shape, tl.float32)  # [NG, BLOCK_N]
        for h in tl.static_range(VBE):
            k = b * VBE + h
            m = valid & (k < K)
            if HAS_PERM:
                k = tl.load(p_ptr + k, mask=m, other=0)
            x = _x_at(x_ptr, norm_ptr, k, m, rstd, NORM)  # [NG, GB]
            if h == 0:
                part += tl.sum(q * x[:, None, :], axis=2)
            else:
                part += tl.sum(q1 * x[:, None, :], axis=2)
        return tl.sum(part, axis=0)
    if FP8:
        x = _x_at(x_ptr, norm_ptr, b, valid, rstd, NORM)  # [NG, GB]
        if MAGIC:
            u = q.to(tl.int32)
            w = (((u & 0x80) << 24) | ((u & 0x7F) << 20)).to(tl.float32, bitcast=True)
            x = x * TWO_60
            sf = sf * TWO_60
        else:
            w = q.to(tl.float32)
        part = tl.sum(w * x[:, None, :], axis=2)  # [NG, BLOCK_N]
    else:
        VB: tl.constexpr = 8 // BITS  # values per byte
        zp = _zero_points(s, z, BITS, HAS_Z, ZOFF)
        if MAGIC:
            zp3 = (zp + TWO_23)[:, :, None]
        part = tl.zeros(s.shape, tl.float32)  # [NG, BLOCK_N]
        xs = tl.zeros(s.shape[:1], tl.float32)  # [NG]
        PAIRS: tl.constexpr = DEQ == INTERLEAVE and VB == 2 and not HAS_PERM
        if PAIRS:
            v = q.to(tl.int32)
            w = tl.interleave(v & 15, v >> 4).to(tl.float32)  # [NG, BLOCK_N, 2 * GB]
            GSR: tl.constexpr = 2 * b.shape[1]
            c2 = tl.arange(0, GSR)[None, :]
            k = tl.arange(0, s.shape[0])[:, None] * GS + c2
            x = _x_at(x_ptr, norm_ptr, k, (c2 < GS) & (k < K), rstd, NORM)  # [NG, 2 * GB]
            part = tl.sum(w * x[:, None, :], axis=2)
            xs = tl.sum(x, axis=1)
        for h in tl.static_range(0 if PAIRS else VB):
            k = b * VB + h
            m = valid & (k < K)
            if HAS_PERM:
                k = tl.load(p_ptr + k, mask=m, other=0)
            x = _x_at(x_ptr, norm_ptr, k, m, rstd, NORM)  # [NG, GB]
            v = q.to(tl.int32)
            if VB > 1:
                v = (v >> (h * BITS)) & ((1 << BITS) - 1)
            # One reduction per pass straight off the products (a chain of FMAs per thread).
            if MAGIC:  # (q - z) exactly, one subtract
                w = (v | 0x4B000000).to(tl.float32, bitcast=True)
                part += tl.sum((w - zp3) * x[:, None, :], axis=2)
            else:  # q alone; the zero point once per group, through the sum of x
                part += tl.sum(v.to(tl.float32) * x[:, None, :], axis=2)
                xs += tl.sum(x, axis=1)
        if not MAGIC:
            part -= zp * xs[:, None]
    return tl.sum(part * sf, axis=0)


@triton.jit
def quant_norm_gemv_kernel(
    x_ptr,  # [M, K]
    norm_ptr,  # [K] RMSNorm weight (NORM only)
    q_ptr, s_ptr, z_ptr, p_ptr,  # the packed weight [N, K] (see the module docstring)
    bias_ptr,  # [N] (HAS_BIAS only)
    y_ptr,  # [M, N]
    M, N, stride_x, stride_q, stride_s, stride_z, stride_y, eps,
    K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FP8: tl.constexpr,
    BITS: tl.constexpr, GS: tl.constexpr, NG: tl.constexpr, GB: tl.constexpr,
    SCALE_ROWS: tl.constexpr, HAS_Z: tl.constexpr, ZOFF: tl.constexpr,
    HAS_PERM: tl.constexpr, NORM: tl.constexpr, HAS_BIAS: tl.constexpr, DEQ: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    q, q1, s, z, idx, valid = _weight_tile(
        q_ptr, s_ptr, z_ptr, rows, N, stride_q, stride_s, stride_z,
        K, FP8, BITS, GS, NG, GB, SCALE_ROWS, HAS_Z, ZOFF, DEQ,
    )  # fmt: skip
    if HAS_BIAS:
        bias = tl.load(bias_ptr + rows, mask=rows < N, other=0.0).to(tl.float32)
    pdl_enter(PDL)
    for m in range(M):
        xr = x_ptr + m * stride_x
        rstd = _rstd(xr, eps, K, BLOCK_K, NORM)
        y = _dot(q, q1, s, z, idx, valid, xr, norm_ptr, p_ptr, rstd,
                 K, GS, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, NORM, DEQ)  # fmt: skip
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
    GS: tl.constexpr, NG: tl.constexpr, GB: tl.constexpr, SCALE_ROWS: tl.constexpr,
    HAS_Z: tl.constexpr, ZOFF: tl.constexpr, HAS_PERM: tl.constexpr, DEQ: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    q, q1, s, z, idx, valid = _weight_tile(
        q_ptr, s_ptr, z_ptr, rows, N, stride_q, stride_s, stride_z,
        K, FP8, BITS, GS, NG, GB, SCALE_ROWS, HAS_Z, ZOFF, DEQ,
    )  # fmt: skip
    pdl_enter(PDL)
    dtype = res_ptr.dtype.element_ty
    for m in range(M):
        # The residual is loaded with x, before the reduction: both L2 round trips overlap.
        res_rows = res_ptr + m * stride_res + rows
        r = tl.load(res_rows, mask=rows < N, other=0.0).to(tl.float32)
        y = _dot(q, q1, s, z, idx, valid, x_ptr + m * stride_x, x_ptr, p_ptr, 1.0,
                 K, GS, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, False, DEQ)  # fmt: skip
        tl.store(res_rows, (r + y.to(dtype).to(tl.float32)).to(dtype), mask=rows < N)


@triton.jit
def quant_norm_gate_up_kernel(
    x_ptr,  # [M, K]
    norm_ptr,  # [K]
    q_ptr, s_ptr, z_ptr, p_ptr,  # the packed weight [2I, K]: gate rows 0..I-1, up I..2I-1
    act_ptr,  # [M, I] out: silu(gate) * up
    M, I, stride_x, stride_q, stride_s, stride_z, stride_act, eps,
    K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FP8: tl.constexpr,
    BITS: tl.constexpr, GS: tl.constexpr, NG: tl.constexpr, GB: tl.constexpr,
    SCALE_ROWS: tl.constexpr, HAS_Z: tl.constexpr, ZOFF: tl.constexpr,
    HAS_PERM: tl.constexpr, DEQ: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    live = rows < I
    # The up rows are the gate rows + I; past I both tiles are masked (row 2I is out).
    up_rows = tl.where(live, rows + I, 2 * I)
    qg, qg1, sg, zg, idx, valid = _weight_tile(
        q_ptr, s_ptr, z_ptr, rows, I, stride_q, stride_s, stride_z,
        K, FP8, BITS, GS, NG, GB, SCALE_ROWS, HAS_Z, ZOFF, DEQ,
    )  # fmt: skip
    qu, qu1, su, zu, idx, valid = _weight_tile(
        q_ptr, s_ptr, z_ptr, up_rows, 2 * I, stride_q, stride_s, stride_z,
        K, FP8, BITS, GS, NG, GB, SCALE_ROWS, HAS_Z, ZOFF, DEQ,
    )  # fmt: skip
    pdl_enter(PDL)
    dtype = act_ptr.dtype.element_ty
    for m in range(M):
        xr = x_ptr + m * stride_x
        rstd = _rstd(xr, eps, K, BLOCK_K, True)
        g = _dot(qg, qg1, sg, zg, idx, valid, xr, norm_ptr, p_ptr, rstd,
                 K, GS, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, True, DEQ)  # fmt: skip
        u = _dot(qu, qu1, su, zu, idx, valid, xr, norm_ptr, p_ptr, rstd,
                 K, GS, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, True, DEQ)  # fmt: skip
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
    BITS: tl.constexpr, GS: tl.constexpr, NG: tl.constexpr, GB: tl.constexpr,
    SCALE_ROWS: tl.constexpr, HAS_Z: tl.constexpr, ZOFF: tl.constexpr,
    HAS_PERM: tl.constexpr, WRITE_LOGITS: tl.constexpr, ARGMAX: tl.constexpr,
    DEQ: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    q, q1, s, z, idx, valid = _weight_tile(
        q_ptr, s_ptr, z_ptr, rows, V, stride_q, stride_s, stride_z,
        K, FP8, BITS, GS, NG, GB, SCALE_ROWS, HAS_Z, ZOFF, DEQ,
    )  # fmt: skip
    pdl_enter(PDL)
    dtype = x_ptr.dtype.element_ty
    for m in range(M):
        xr = x_ptr + m * stride_x
        rstd = _rstd(xr, eps, K, BLOCK_K, True)
        logit = _dot(q, q1, s, z, idx, valid, xr, norm_ptr, p_ptr, rstd,
                     K, GS, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, True, DEQ)  # fmt: skip
        logit = logit.to(dtype).to(tl.float32)
        head_store(logit, pid * BLOCK_N, rows, V, logits_ptr + m * stride_logits, key_ptr + m,
                   WRITE_LOGITS, ARGMAX)  # fmt: skip
