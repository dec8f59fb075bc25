"""RoPE tables, and the launcher of the fused q/k-norm + RoPE + cache-append kernel.

`rope_table` builds cos/sin exactly as transformers' default RoPE does (inverse frequencies
in float32, angle = position * inv_freq as one float32 product), once per engine, as
`[P, D/2]` float32 tables indexed by position inside the step (no host work per token).

`qk_norm_rope_append` has the signature and result of ops/reference.py.
"""

from __future__ import annotations

import torch

from evokernel.ops.grid import next_pow2


def rope_table(
    head_dim: int, theta: float, length: int, device: str | torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each [length, head_dim / 2] float32."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64).float().to(device) / head_dim
    inv_freq = 1.0 / (theta**exponent)  # [D/2]
    positions = torch.arange(length, device=device, dtype=torch.float32)
    angles = positions[:, None] * inv_freq[None, :]  # [P, D/2]
    return angles.cos().contiguous(), angles.sin().contiguous()


def qk_norm_rope_append(
    qkv: torch.Tensor,
    q_norm: torch.Tensor,
    k_norm: torch.Tensor,
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
        qkv, q_norm, k_norm, cos, sin, positions, q_out, k_cache, v_cache,
        T, hq, hkv, S, cos.shape[0], width, eps,
        D=D, BLOCK_H=block_h, BLOCK_HALF=block_half,
        num_warps=4 if block_h * block_half <= 2048 else 8,
    )  # fmt: skip
    return q_out
