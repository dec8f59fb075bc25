"""Decode GEMV kernels on packed weights (FP8 blocks, 4- and 8-bit integers), fused as the
bf16 kernels of kernels/gemv.py are, with the same rounding.

A decode step reads every weight once, so the packed bytes are the floor: program p owns
BLOCK_N output rows and the whole K, and loads its rows' packed bytes (and their scales and
zero points) in one go, as a byte tile indexed [group, row, byte] (groups outermost: Triton
then gives each thread several rows of the same bytes, so each activation it prepares serves
those rows) with each group's scale a [NG, BLOCK_N] tile applied once per group, *before* the
PDL wait (the weights stream in while the previous kernel finishes). Only then does it read
the activations: once per row, at the tile's columns, the RMS of a normed op taken over that
same load (`_x_tiles`), shared by every weight tile of the program. Weights are loaded with
`evict_first`: read once per step, they must not push the activations out of L2.

Weight layouts (model/quant/packed.py), read as bytes: row r is BYTES bytes, group g its bytes
g*GBR .. g*GBR+GBR-1 (GBR = GS * BITS / 8 real bytes per group of GS columns; NG groups and
GB bytes padded to powers of two, masked):
  FP8   q  float8e4nv, or uint8 with MAGIC: byte b is column b
        s  float32 [NG, BLOCK_N], row r's scale row r // SCALE_ROWS
        y[r] = sum_g s[g, r] * sum_b float(q[r, b]) * x[b]
  INT   q  uint8 (the int32 words' little-endian bytes): byte b holds columns b*VB + h,
        h < VB = 8 / BITS, at bits [h*BITS, (h+1)*BITS) (the word order of packed.py)
        s  [NG, BLOCK_N] (any float), z uint8 [NG, BLOCK_N] (HAS_Z) + ZOFF, else 2**(BITS-1)
        y[r] = sum_g s[g, r] * sum_{b,h} (q[r, b, h] - z[g, r]) * x[k]
        with k = perm[b*VB + h] when HAS_PERM (act-order, at K < ops/quant.py GATHER_K; from
        there the launcher gathers x into stored order first), else b*VB + h.

DEQ picks how and when a packed value becomes a float32 (ops/quant.py chooses per format, op
and K; every way gives the same float32 values and products):
  CONVERT     Triton's casts after the PDL wait (I2FP on sm_90 once the value sits in a 32-bit
              register; FP8 pairs through float16); INT folds the zero point in once per group
              as s * (sum q x - z * sum x). One pass per value position h of a byte.
  MAGIC_BITS  no conversion instruction. INT: the value v is OR-ed into the mantissa of 2**23
              (bits 0x4B000000 | v = 2**23 + v, exact) and the zero point moves by the same
              2**23, so (q - z) is one exact subtract. FP8: the e4m3 bits are placed in
              float32's sign, exponent and mantissa fields (2**-120 times the e4m3 value,
              subnormals included, exact); the activations and the scales are each multiplied
              by 2**60 so that every product stays a normal float32.
  EARLY       the casts, zero points and scales before the PDL wait: the tile is the float32
              weights (q - z) * s (`dequantize(float32)`'s values), and what follows the wait
              is the bf16 kernels' products.
  INTERLEAVE  (4 bits) a byte's two values interleaved into column order (`tl.interleave`),
              so that x loads contiguously (or through the permutation in column order); a
              strided gather per value position costs 3-17x at these shapes.

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
EARLY = tl.constexpr(2)  # DEQ: casts, zero points and scales before the wait (float32 tile)
INTERLEAVE = tl.constexpr(3)  # DEQ: 4 bits, a byte's two values interleaved in column order
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
def _columns(b, valid, p_ptr, h: tl.constexpr, VB: tl.constexpr, K: tl.constexpr,
             HAS_PERM: tl.constexpr):  # fmt: skip
    """The input column of value h of each tile byte b [NG, GB], and its mask."""
    k = b * VB + h
    m = valid & (k < K)
    if HAS_PERM:
        k = tl.load(p_ptr + k, mask=m, other=0)
    return k, m


@triton.jit
def _normed(x, x_ptr, norm_ptr, k, m, rstd):
    """RMS-normalised activations, rounded as transformers rounds (to the dtype before and
    after the norm weight)."""
    dtype = x_ptr.dtype.element_ty
    w = tl.load(norm_ptr + k, mask=m, other=0.0).to(tl.float32)
    return ((x * rstd).to(dtype).to(tl.float32) * w).to(dtype).to(tl.float32)


@triton.jit
def _x_tiles(
    x_ptr, norm_ptr, p_ptr, b, valid, eps,
    K: tl.constexpr, GS: tl.constexpr, FP8: tl.constexpr, BITS: tl.constexpr,
    HAS_PERM: tl.constexpr, NORM: tl.constexpr, DEQ: tl.constexpr,
):  # fmt: skip
    """(x0, x1): the activation row at `_weight_tile`'s columns (b, valid), float32: x0 at
    each byte's first value [NG, GB] (4 bits interleaved: at both values in column order
    [NG, 2 * GB]), x1 at its second (4 bits, not interleaved; else x1 is x0). With NORM
    they are RMS-normalised, the RMS taken over these same loads (the tile's columns are the
    row's, each once): one round trip. Computed once per activation row, for every weight
    tile a program holds."""
    VB: tl.constexpr = 1 if FP8 else 8 // BITS  # values per byte
    PAIRS: tl.constexpr = DEQ == INTERLEAVE and VB == 2
    if PAIRS:
        c2 = tl.arange(0, 2 * b.shape[1])[None, :]
        k0 = tl.arange(0, b.shape[0])[:, None] * GS + c2
        m0 = (c2 < GS) & (k0 < K)
        if HAS_PERM:
            k0 = tl.load(p_ptr + k0, mask=m0, other=0)
    else:
        k0, m0 = _columns(b, valid, p_ptr, 0, VB, K, HAS_PERM)
    TWO: tl.constexpr = VB == 2 and not PAIRS
    x0 = tl.load(x_ptr + k0, mask=m0, other=0.0).to(tl.float32)
    x1 = x0
    if TWO:
        k1, m1 = _columns(b, valid, p_ptr, 1, VB, K, HAS_PERM)
        x1 = tl.load(x_ptr + k1, mask=m1, other=0.0).to(tl.float32)
    if NORM:
        ss = tl.sum(tl.sum(x0 * x0, axis=1), axis=0)
        if TWO:
            ss += tl.sum(tl.sum(x1 * x1, axis=1), axis=0)
        rstd = tl.rsqrt(ss / K + eps)
        x0 = _normed(x0, x_ptr, norm_ptr, k0, m0, rstd)
        if TWO:
            x1 = _normed(x1, x_ptr, norm_ptr, k1, m1, rstd)
        else:
            x1 = x0
    return x0, x1


@triton.jit
def _dot(
    q, q1, s, z, x0, x1,
    FP8: tl.constexpr, BITS: tl.constexpr, HAS_Z: tl.constexpr, ZOFF: tl.constexpr,
    HAS_PERM: tl.constexpr, DEQ: tl.constexpr,
):  # fmt: skip
    """sum_k W[r, k] x[k] for each row r of the tile (`_weight_tile`'s q, q1, s, z) with the
    activations of `_x_tiles` (x0, x1): [BLOCK_N] float32."""
    sf = s.to(tl.float32)
    MAGIC: tl.constexpr = DEQ == MAGIC_BITS
    VB: tl.constexpr = 1 if FP8 else 8 // BITS  # values per byte
    PAIRS: tl.constexpr = DEQ == INTERLEAVE and VB == 2
    if DEQ == EARLY:  # the weights are float32 already: the bf16 kernels' products
        part = tl.sum(q * x0[:, None, :], axis=2)  # [NG, BLOCK_N]
        if VB == 2:
            part += tl.sum(q1 * x1[:, None, :], axis=2)
        return tl.sum(part, axis=0)
    if FP8:
        x = x0
        if MAGIC:
            u = q.to(tl.int32)
            w = (((u & 0x80) << 24) | ((u & 0x7F) << 20)).to(tl.float32, bitcast=True)
            x = x * TWO_60
            sf = sf * TWO_60
        else:
            w = q.to(tl.float32)
        part = tl.sum(w * x[:, None, :], axis=2)  # [NG, BLOCK_N]
    else:
        zp = _zero_points(s, z, BITS, HAS_Z, ZOFF)
        if PAIRS:
            v = q.to(tl.int32)
            w = tl.interleave(v & 15, v >> 4).to(tl.float32)  # [NG, BLOCK_N, 2 * GB]
            part = tl.sum(w * x0[:, None, :], axis=2)
            part -= zp * tl.sum(x0, axis=1)[:, None]
        else:
            # One pass per value of a byte, each reduced straight off its products (a chain
            # of FMAs per thread).
            if MAGIC:
                zp3 = (zp + TWO_23)[:, :, None]
            part = tl.zeros(s.shape, tl.float32)  # [NG, BLOCK_N]
            xs = tl.zeros(s.shape[:1], tl.float32)  # [NG]
            for h in tl.static_range(VB):
                if h == 0:
                    x = x0
                else:
                    x = x1
                v = q.to(tl.int32)
                if VB > 1:
                    v = (v >> (h * BITS)) & ((1 << BITS) - 1)
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
    K: tl.constexpr, BLOCK_N: tl.constexpr, FP8: tl.constexpr,
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
        x0, x1 = _x_tiles(xr, norm_ptr, p_ptr, idx, valid, eps,
                          K, GS, FP8, BITS, HAS_PERM, NORM, DEQ)  # fmt: skip
        y = _dot(q, q1, s, z, x0, x1, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, DEQ)
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
        x0, x1 = _x_tiles(x_ptr + m * stride_x, x_ptr, p_ptr, idx, valid, 0.0,
                          K, GS, FP8, BITS, HAS_PERM, False, DEQ)  # fmt: skip
        y = _dot(q, q1, s, z, x0, x1, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, DEQ)
        tl.store(res_rows, (r + y.to(dtype).to(tl.float32)).to(dtype), mask=rows < N)


@triton.jit
def quant_norm_gate_up_kernel(
    x_ptr,  # [M, K]
    norm_ptr,  # [K]
    q_ptr, s_ptr, z_ptr, p_ptr,  # the packed weight [2I, K]: gate rows 0..I-1, up I..2I-1
    act_ptr,  # [M, I] out: silu(gate) * up
    M, I, stride_x, stride_q, stride_s, stride_z, stride_act, eps,
    K: tl.constexpr, BLOCK_N: tl.constexpr, FP8: tl.constexpr,
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
        x0, x1 = _x_tiles(xr, norm_ptr, p_ptr, idx, valid, eps,
                          K, GS, FP8, BITS, HAS_PERM, True, DEQ)  # fmt: skip
        g = _dot(qg, qg1, sg, zg, x0, x1, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, DEQ)
        u = _dot(qu, qu1, su, zu, x0, x1, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, DEQ)
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
    K: tl.constexpr, BLOCK_N: tl.constexpr, FP8: tl.constexpr,
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
        x0, x1 = _x_tiles(xr, norm_ptr, p_ptr, idx, valid, eps,
                          K, GS, FP8, BITS, HAS_PERM, True, DEQ)  # fmt: skip
        logit = _dot(q, q1, s, z, x0, x1, FP8, BITS, HAS_Z, ZOFF, HAS_PERM, DEQ)
        logit = logit.to(dtype).to(tl.float32)
        head_store(logit, pid * BLOCK_N, rows, V, logits_ptr + m * stride_logits, key_ptr + m,
                   WRITE_LOGITS, ARGMAX)  # fmt: skip
