"""Packed weights for kernel tests, drawn directly in the kernels' layouts (model/quant/packed.py),
and the float32 references the quantized kernels are held to.

The references compute every product in float32 from `dequantize(float32)` (exact) and round
where the dense kernels round (kernels/gemv.py): the norm to the dtype before and after its
weight, each projection output, the residual sum, SiLU and the product.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from evokernel.model.quant.packed import INT_CLASSES, Fp8Weight, IntWeight, cdiv, pack_values
from evokernel.ops import reference

EPS = 1e-6


def int_weight(
    N: int,
    K: int,
    bits: int,
    group_size: int,
    g: torch.Generator,
    *,
    zeros: bool = True,
    perm: bool = False,
    zero_offset: int = 0,
    scale_dtype: torch.dtype = torch.float16,
    device: str = "cpu",
) -> IntWeight:
    """Random integers, scales ~ 1/(2**bits sqrt(K)) so that outputs are O(1) for unit
    inputs; asymmetric zero points anywhere in range; a random column order."""
    gs = K if group_size == -1 else group_size
    G = cdiv(K, gs)
    maxq = (1 << bits) - 1
    q = torch.randint(0, maxq + 1, (N, K), generator=g)
    scales = (torch.rand(N, G, generator=g) + 0.5) * (4.0 / (maxq * K**0.5))
    z = None
    if zeros:
        z = torch.randint(0, maxq + 1 - zero_offset, (N, G), generator=g).to(torch.uint8)
    p = torch.randperm(K, generator=g).to(torch.int32) if perm else None
    cls = INT_CLASSES[bits]
    w = cls(pack_values(q, bits), scales.to(scale_dtype), z, p, K, gs, zero_offset)
    return w.to(device)


def fp8_weight(
    N: int, K: int, block: tuple[int, int], g: torch.Generator, device: str = "cpu"
) -> Fp8Weight:
    weight = (torch.randn(N, K, generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    SN, SK = cdiv(N, block[0]), cdiv(K, block[1])
    scale = (torch.rand(SN, SK, generator=g) + 0.5) / (64 * K**0.5)
    return Fp8Weight(weight, scale, block[0], block[1]).to(device)


def _round(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.to(dtype)


def ref_linear(x: torch.Tensor, w, bias: torch.Tensor | None = None) -> torch.Tensor:
    y = F.linear(x.float(), w.dequantize(torch.float32))
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def ref_norm_linear(x, norm_w, w, eps=EPS, bias=None) -> torch.Tensor:
    return ref_linear(reference.rms_norm(x, norm_w, eps), w, bias)


def ref_linear_residual(x, w, residual) -> torch.Tensor:
    return residual + ref_linear(x, w)


def ref_gate_up(x, norm_w, gate_up, eps=EPS) -> torch.Tensor:
    gu = ref_linear(reference.rms_norm(x, norm_w, eps), gate_up)
    return reference.silu_mul(gu)


def ref_logits(x, norm_w, lm_head, eps=EPS) -> torch.Tensor:
    return ref_linear(reference.rms_norm(x, norm_w, eps), lm_head).float()
