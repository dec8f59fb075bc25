"""Dense weights -> the published tensors of each layout, by round to nearest (no calibration).

    fp8_block(w, (128, 128))        -> weight F8_E4M3 [N, K], weight_scale_inv F32
    fp8_tensor(w)                   -> weight F8_E4M3 [N, K], weight_scale F32 [] (AutoFP8)
    int_groups(w, bits, gs, sym)    -> q [N, K] in 0..2**bits-1, scales F16 [N, G], zeros [N, G]
    gptq_tensors(q, scales, zeros, bits, gs)  -> qweight, qzeros (v1: zero - 1), scales, g_idx
    awq_tensors(q, scales, zeros)   -> qweight, qzeros, scales (AutoAWQ GEMM order)
    ct_int_tensors(q, scales, zeros, bits, sym)  -> compressed-tensors pack-quantized:
                                       weight_packed, weight_scale, weight_shape
                                       (+ weight_zero_point when asymmetric)

FP8 follows transformers' `Fp8Quantize`: per block, scale = amax / 448 (1 for an all-zero
block), weight = clamp(w / scale, -448, 448) cast to e4m3 (round to nearest even), and the
stored `weight_scale_inv` is that scale (dequantization multiplies by it). Partial blocks at
the right and bottom edges take the amax of the values they hold. Per tensor is AutoFP8's
`per_tensor_quantize` step for step, in the weight's own dtype as it runs (a bf16 checkpoint:
a bf16 scale and product): scale = 448 / max(amax, 1e-12) over the whole weight, weight =
clamp(w x scale, -448, 448) cast to e4m3, stored `weight_scale` = 1 / scale in float32.

Integers follow the min-max quantizer of GPTQ (`Quantizer.find_params`) without its Hessian
updates: per group of `gs` input columns, xmin = min(w, 0) and xmax = max(w, 0) (symmetric:
xmax = max(|xmin|, xmax), xmin = -xmax), scale = (xmax - xmin) / (2**bits - 1) rounded to
float16, zero = round(-xmin / scale) (symmetric: 2**(bits-1)), q = clamp(round(w / scale) +
zero, 0, 2**bits - 1), with the float16 scale, as the packers do. A group of zeros gets scale
1. GPTQ v1 stores zero - 1, which cannot hold a zero point of 0: such zero points are raised
to 1 (and the group's q recomputed), so that every reader decodes the same values.
"""

from __future__ import annotations

import torch

from evokernel.model.quant.convert import AWQ_ORDER
from evokernel.model.quant.packed import FP8_DTYPE, FP8_MAX, cdiv


def fp8_block(w: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    N, K = w.shape
    bn, bk = block
    SN, SK = cdiv(N, bn), cdiv(K, bk)
    padded = torch.zeros((SN * bn, SK * bk), dtype=torch.float32, device=w.device)
    padded[:N, :K] = w.float()
    tiles = padded.view(SN, bn, SK, bk)
    amax = tiles.abs().amax(dim=(1, 3))  # [SN, SK]
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (tiles / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.view(SN * bn, SK * bk)[:N, :K].to(FP8_DTYPE)
    return q.contiguous(), scale.contiguous()


def fp8_tensor(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lo, hi = w.aminmax()  # in the weight's own dtype, as AutoFP8 computes it
    scale = FP8_MAX / torch.maximum(lo.abs(), hi.abs()).clamp(min=1e-12)
    q = (w * scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q.contiguous(), scale.float().reciprocal()


def int_groups(
    w: torch.Tensor, bits: int, group_size: int, sym: bool, min_zero: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q int32 [N, K], scales float16 [N, G], zeros int32 [N, G]); `group_size` -1 is one
    group per row; `min_zero` 1 for GPTQ v1 (see the module docstring)."""
    N, K = w.shape
    gs = K if group_size == -1 else group_size
    G = cdiv(K, gs)
    maxq = (1 << bits) - 1
    padded = torch.zeros((N, G * gs), dtype=torch.float32, device=w.device)
    padded[:, :K] = w.float()
    groups = padded.view(N, G, gs)
    # Padding zeros fall inside [min(w, 0), max(w, 0)]: they change no group's range.
    xmin = groups.amin(-1).clamp(max=0)
    xmax = groups.amax(-1).clamp(min=0)
    if sym:
        xmax = torch.maximum(xmin.abs(), xmax)
        xmin = torch.where(xmin < 0, -xmax, xmin)
    empty = (xmin == 0) & (xmax == 0)
    xmin = torch.where(empty, -torch.ones_like(xmin), xmin)
    xmax = torch.where(empty, torch.ones_like(xmax), xmax)
    scales = ((xmax - xmin) / maxq).half()
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))  # float16 underflow
    s = scales.float()
    if sym:
        zeros = torch.full_like(s, float((maxq + 1) // 2))
    else:
        zeros = torch.round(-xmin / s).clamp(min_zero, maxq)
    q = torch.clamp(torch.round(groups / s[..., None]) + zeros[..., None], 0, maxq)
    q = q.view(N, G * gs)[:, :K].to(torch.int32)
    return q.contiguous(), scales.contiguous(), zeros.to(torch.int32)


def _pack_rows(values: torch.Tensor, bits: int) -> torch.Tensor:
    """[R, C] unsigned -> int32 [R / p, C]: value r of a column in bits [(r % p) * bits, ...)
    of word r // p (GPTQ's qweight, packed along the input dimension)."""
    per = 32 // bits
    R, C = values.shape
    v = values.to(torch.int64).view(R // per, per, C)
    shifts = torch.arange(0, 32, bits, device=values.device, dtype=torch.int64).view(1, per, 1)
    return _int32((v << shifts).sum(1))


def _int32(words: torch.Tensor) -> torch.Tensor:
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)


def gptq_tensors(
    q: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    bits: int,
    group_size: int,
    v1: bool = True,
) -> dict[str, torch.Tensor]:
    """GPTQ's published tensors of one module from `int_groups`' output (q [N, K], scales
    and zeros [N, G]): qweight [K/p, N], qzeros [G, N/p], scales [G, N], g_idx [K]."""
    _N, K = q.shape
    gs = K if group_size == -1 else group_size
    stored = (zeros - 1) & ((1 << bits) - 1) if v1 else zeros
    return {
        "qweight": _pack_rows(q.t().contiguous(), bits),
        "qzeros": _pack_rows(stored.contiguous(), bits).t().contiguous(),  # along N
        "scales": scales.t().contiguous(),
        "g_idx": (torch.arange(K, device=q.device) // gs).to(torch.int32),
    }


def awq_tensors(
    q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor
) -> dict[str, torch.Tensor]:
    """AutoAWQ GEMM tensors of one 4-bit module: qweight [K, N/8], qzeros [G, N/8],
    scales [G, N]; nibble i of each word holds output column 8c + AWQ_ORDER[i]."""

    def pack(v: torch.Tensor) -> torch.Tensor:  # [R, N] -> [R, N/8]
        R, N = v.shape
        cols = v.to(torch.int64).view(R, N // 8, 8)[:, :, list(AWQ_ORDER)]
        shifts = torch.arange(0, 32, 4, device=v.device, dtype=torch.int64)
        return _int32((cols << shifts).sum(-1))

    return {
        "qweight": pack(q.t().contiguous()),
        "qzeros": pack(zeros.t().contiguous()),
        "scales": scales.t().contiguous(),
    }


def ct_int_tensors(
    q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, bits: int, sym: bool
) -> dict[str, torch.Tensor]:
    """compressed-tensors' pack-quantized tensors of one module from `int_groups`' output:
    weight_packed [N, K/p] (q, already 2**(bits-1) above the signed value, packed along K),
    weight_scale [N, G], weight_shape [2] int64, and for asymmetric groups weight_zero_point
    [N/p, G] packed along N (compressed-tensors' `pack_to_int32`, `packed_dim` 1 and 0)."""
    N, K = q.shape
    out = {
        "weight_packed": _pack_rows(q.t().contiguous(), bits).t().contiguous(),
        "weight_scale": scales.contiguous(),
        "weight_shape": torch.tensor([N, K], dtype=torch.int64),
    }
    if not sym:
        out["weight_zero_point"] = _pack_rows(zeros.contiguous(), bits)
    return out
