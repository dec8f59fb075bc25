"""RoPE tables, and the launcher of the fused q/k-norm + RoPE + cache-append kernel.

`rope_table` builds cos/sin exactly as transformers does (inverse frequencies in float32,
with the checkpoint's scaling rule applied as transformers' `ROPE_INIT_FUNCTIONS` apply it,
angle = position * inv_freq as one float32 product), once per engine, as `[P, D/2]` float32
tables indexed by position inside the step (no host work per token).

`qk_norm_rope_append` has the signature and result of ops/reference.py (`q_norm`/`k_norm`
None for families without q/k norms).
"""

from __future__ import annotations

import math

import torch

from evokernel.model.rope import RopeScaling
from evokernel.ops.grid import next_pow2


def inverse_frequencies(
    head_dim: int, theta: float, scaling: RopeScaling | None, device: str | torch.device
) -> torch.Tensor:
    """[D/2] float32: theta ** (-2i / D), then the scaling rule (model/rope.py)."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64).float().to(device) / head_dim
    inv_freq = 1.0 / (theta**exponent)  # [D/2]
    if scaling is None:
        return inv_freq
    if scaling.rope_type == "linear":
        return inv_freq / scaling.factor
    # llama3: wavelengths beyond the original context's low-frequency bound are slowed by
    # `factor`; those under its high-frequency bound are kept; the band between is blended.
    assert scaling.low_freq_factor is not None and scaling.high_freq_factor is not None
    assert scaling.original_max_position_embeddings is not None
    old = scaling.original_max_position_embeddings
    low_wavelen = old / scaling.low_freq_factor
    high_wavelen = old / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (old / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    blended = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, blended, scaled)


def rope_table(
    head_dim: int,
    theta: float,
    length: int,
    device: str | torch.device,
    scaling: RopeScaling | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each [length, head_dim / 2] float32."""
    inv_freq = inverse_frequencies(head_dim, theta, scaling, device)
    positions = torch.arange(length, device=device, dtype=torch.float32)
    angles = positions[:, None] * inv_freq[None, :]  # [P, D/2]
    return angles.cos().contiguous(), angles.sin().contiguous()


def qk_norm_rope_append(
    qkv: torch.Tensor,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    from evokernel.kernels.rope import qk_norm_rope_append_kernel

    B, T, width = qkv.shape
    assert k_cache.dim() == 4 and k_cache.shape == v_cache.shape, "caches: [B, Hkv, S, D]"
    cache_b, hkv, S, D = k_cache.shape
    hq = width // D - 2 * hkv
    assert D % 2 == 0 and width == (hq + 2 * hkv) * D and hq > 0 and hq % hkv == 0, (width, D)
    assert cache_b >= B, f"batch {B} exceeds the cache's {cache_b}"
    assert qkv.is_contiguous() and k_cache.is_contiguous() and v_cache.is_contiguous()
    assert k_cache.dtype == v_cache.dtype, (k_cache.dtype, v_cache.dtype)
    qk_norm = q_norm is not None
    assert (k_norm is not None) == qk_norm, "q_norm and k_norm come together"
    if q_norm is not None and k_norm is not None:
        assert q_norm.shape == (D,) and k_norm.shape == (D,), (tuple(q_norm.shape), D)
        assert q_norm.is_contiguous() and k_norm.is_contiguous()
    assert cos.dtype == torch.float32 and sin.dtype == torch.float32
    assert cos.shape == sin.shape and cos.shape[1] == D // 2 and cos.is_contiguous()
    assert sin.is_contiguous()
    assert positions.shape == (B, T) and positions.dtype == torch.int32
    assert positions.is_contiguous()
    q_out = torch.empty((B, T, hq, D), device=qkv.device, dtype=qkv.dtype)
    block_h, block_half = next_pow2(hq + hkv), next_pow2(D // 2)
    qk_norm_rope_append_kernel[(B * T,)](
        qkv, q_norm if qk_norm else cos, k_norm if qk_norm else cos, cos, sin, positions,
        q_out, k_cache, v_cache, T, hq, hkv, S, cos.shape[0], width, eps,
        D=D, BLOCK_H=block_h, BLOCK_HALF=block_half, QK_NORM=qk_norm,
        num_warps=4 if block_h * block_half <= 2048 else 8,
    )  # fmt: skip
    return q_out
