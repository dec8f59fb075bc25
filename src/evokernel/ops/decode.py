"""The engine's fused decode-step ops: checked arguments, then the right launcher.

Same signatures and results as the fused ops of ops/compose.py (`norm_linear`,
`linear_residual`, `norm_gate_up_silu`, `decode_attention_qkv`, `norm_logits`, `greedy_head`),
plus a keyword `tuning` (a `DecodeTuning`, ops/tuning.py; the OpSet binds it). Rows per call:
1..`MAX_ROWS` (the decode batch). The engine's prefill keeps the unfused ops.

Where each call goes:
  * a packed (quantized) projection or head (model/weights.py `PackedWeight`): the format's
    launchers (ops/quant.py), same contracts;
  * dense residual projections from `tuning.cuda_rows_min` to `cuda_rows_max` rows (within
    those norm_linear from `cuda_rows_norm` rows, gate_up from `cuda_rows_gate_up`, the head
    with `cuda_rows_head`): the CUDA C++
    tensor-core kernel where it applies (ops/rows_cuda.py: bf16/fp16, K a multiple of 128 up
    to 4,096, sm_90+, nvcc present); otherwise ops/layer.py, the launchers the `decode_layer`
    task's seed is generated from (one-row CUDA-core kernels below `tuning.rows_min` rows,
    the Triton tensor-core rows kernels from there on);
  * the fused attention bounded by <= `tuning.cuda_direct_max` positions (at most 4,096): the
    CUDA C++ one-pass kernel where it applies (`tuning.cuda_direct`, ops/attention_cuda.py:
    head_dim 128, 2 query heads per kv head, q/k norms, bf16/fp16, sm_90+, nvcc present;
    beyond 256 rows a cluster of at least `tuning.cuda_cluster` CTAs per kv head, while the
    grid takes at most half the SMs; where they do not fit, with `tuning.cuda_tiles`, two
    tiles a warp, one CTA a kv head to 512 rows), else ops/layer.py's Triton attention;
  * the head (final norm + lm_head): its logits, or greedy argmax folded into one int64 key
    per row by the lm_head programs (an atomic max on a kept zeroed buffer, `argmax_keys`)
    and a one-program kernel that turns the keys into tokens.
All of it depends on shapes and host-side bounds only: no host sync, graph-capturable.
Importing this module imports the kernels (Triton): do it after `evokernel.device.prepare`.
"""

from __future__ import annotations

import torch

from evokernel.model.weights import PackedWeight, Weight
from evokernel.ops import attention_cuda, layer, quant, rows_cuda
from evokernel.ops.grid import MAX_ROWS, check_rows
from evokernel.ops.layer import kept_zeros, next_pow2
from evokernel.ops.tuning import DEFAULT, DecodeTuning

ARGMAX_MAX_VOCAB = 1 << 24  # greedy_head's argmax keys hold the id in 24 bits

__all__ = [
    "DEFAULT",
    "MAX_ROWS",
    "DecodeTuning",
    "argmax_keys",
    "attention_split",
    "attention_tickets",
    "decode_attention",
    "decode_attention_qkv",
    "greedy_head",
    "linear_residual",
    "norm_gate_up_silu",
    "norm_linear",
    "norm_logits",
]


def attention_split(
    max_len: int, programs_per_split: int, device: torch.device, tuning: DecodeTuning = DEFAULT
) -> int:
    """Chunks per sequence for a bound on seq_lens (ops/layer.py `attention_split`)."""
    return int(layer.attention_split(max_len, programs_per_split, device, tuning))


def _dense(weight: Weight, K: int, x: torch.Tensor) -> torch.Tensor:
    assert isinstance(weight, torch.Tensor)
    assert weight.shape[1] == K and weight.stride(1) == 1, (tuple(weight.shape), K)
    assert weight.dtype == x.dtype, (x.dtype, weight.dtype)
    return weight


def _cuda_rows(
    x: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor | None, op: int,
    tuning: DecodeTuning,
) -> bool:  # fmt: skip
    """Whether this call goes to the CUDA rows kernel (ops/rows_cuda.py): the normed
    projections from `tuning.cuda_rows_norm` / `cuda_rows_gate_up` rows (0: never; the head's
    caller checks `cuda_rows_head`)."""
    low = tuning.cuda_rows_min
    if op == rows_cuda.OP_LINEAR:
        low = max(low, tuning.cuda_rows_norm) if tuning.cuda_rows_norm and low else 0
    elif op == rows_cuda.OP_GATE_UP:
        low = max(low, tuning.cuda_rows_gate_up) if tuning.cuda_rows_gate_up and low else 0
    return (
        bool(low)
        and low <= x.shape[0] <= tuning.cuda_rows_max
        and rows_cuda.applies(
            x, weight, norm_weight, op, tuning.cuda_rows_warps, rows_cuda.ENGINE_MAX_CHUNKS
        )
    )


def norm_linear(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    weight: Weight,
    eps: float,
    bias: torch.Tensor | None = None,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> torch.Tensor:
    N, K = weight.shape
    check_rows(x, K)
    assert norm_weight.shape == (K,) and norm_weight.dtype == x.dtype
    assert bias is None or (bias.shape == (N,) and bias.is_contiguous())
    if isinstance(weight, PackedWeight):
        return quant.norm_linear(x, norm_weight, weight, eps, bias, tuning=tuning)
    dense = _dense(weight, K, x)
    if _cuda_rows(x, dense, norm_weight, rows_cuda.OP_LINEAR, tuning):
        y = torch.empty((x.shape[0], N), device=x.device, dtype=x.dtype)
        rows_cuda.launch(rows_cuda.OP_LINEAR, x, dense, y, norm_weight=norm_weight, eps=eps,
                         bias=bias, pdl=tuning.pdl, warps=tuning.cuda_rows_warps)  # fmt: skip
        return y
    return layer.norm_linear(x, norm_weight, dense, bias, eps, tuning)


def linear_residual(
    x: torch.Tensor,
    weight: Weight,
    residual: torch.Tensor,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> torch.Tensor:
    N, K = weight.shape
    M = check_rows(x, K)
    assert residual.shape == (M, N) and residual.stride(1) == 1 and residual.dtype == x.dtype
    if isinstance(weight, PackedWeight):
        return quant.linear_residual(x, weight, residual, tuning=tuning)
    dense = _dense(weight, K, x)
    if _cuda_rows(x, dense, None, rows_cuda.OP_RESIDUAL, tuning):
        rows_cuda.launch(rows_cuda.OP_RESIDUAL, x, dense, residual, pdl=tuning.pdl,
                         warps=tuning.cuda_rows_warps)  # fmt: skip
        return residual
    return layer.linear_residual(x, dense, residual, tuning)


def norm_gate_up_silu(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    gate_up: Weight,
    eps: float,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> torch.Tensor:
    two_i, K = gate_up.shape
    check_rows(x, K)
    assert two_i % 2 == 0 and norm_weight.shape == (K,) and norm_weight.dtype == x.dtype
    if isinstance(gate_up, PackedWeight):
        return quant.norm_gate_up_silu(x, norm_weight, gate_up, eps, tuning=tuning)
    dense = _dense(gate_up, K, x)
    if _cuda_rows(x, dense, norm_weight, rows_cuda.OP_GATE_UP, tuning):
        act = torch.empty((x.shape[0], two_i // 2), device=x.device, dtype=x.dtype)
        rows_cuda.launch(rows_cuda.OP_GATE_UP, x, dense, act, norm_weight=norm_weight, eps=eps,
                         pdl=tuning.pdl, warps=tuning.cuda_rows_warps)  # fmt: skip
        return act
    return layer.norm_gate_up_silu(x, norm_weight, dense, eps, tuning)


def attention_tickets(device: torch.device, n: int) -> torch.Tensor:
    """At least `n` int32 counters, zero between attention launches (ops/layer.py
    `kept_zeros`)."""
    return kept_zeros("tickets", device, n, torch.int32)


def argmax_keys(device: torch.device, n: int) -> torch.Tensor:
    """At least `n` int64 argmax keys, zero between greedy heads (`kept_zeros`)."""
    return kept_zeros("argmax", device, n, torch.int64)


def decode_attention_qkv(
    qkv: torch.Tensor,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    eps: float,
    max_len: int,
    *,
    tuning: DecodeTuning = DEFAULT,
    split: int | None = None,
) -> torch.Tensor:
    B = qkv.shape[0]
    hkv, D = k_cache.shape[1], k_cache.shape[3]
    hq = qkv.shape[1] // D - 2 * hkv
    assert qkv.dim() == 2 and qkv.shape[1] == (hq + 2 * hkv) * D and hq % hkv == 0, qkv.shape
    assert qkv.is_contiguous() and (q_norm is None) == (k_norm is None)
    assert q_norm is None or (q_norm.shape == (D,) and k_norm is not None and k_norm.shape == (D,))
    assert cos.shape == sin.shape and cos.shape[1] == D // 2 and cos.dtype == torch.float32
    assert positions.shape == (B,) and positions.dtype == torch.int32
    _check_attention(qkv, k_cache, v_cache, seq_lens)
    bound = min(max_len, k_cache.shape[2])
    if (
        split is None and tuning.cuda_direct and q_norm is not None and k_norm is not None
        and (cuda_split := attention_cuda.split_for(
            qkv, k_cache, hq, bound, tuning.cuda_direct_max, tuning.cuda_cluster,
            tuning.cuda_tiles, tuning.cuda_tiles_from,
        )) is not None
    ):  # fmt: skip
        out = torch.empty((B, hq, D), device=qkv.device, dtype=qkv.dtype)
        attention_cuda.launch(qkv, q_norm, k_norm, cos, sin, positions, k_cache, v_cache,
                              seq_lens, scale, eps, out, tuning.pdl, cuda_split)  # fmt: skip
        return out.view(B, hq * D)
    return layer.attention(
        qkv, q_norm, k_norm, cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps,
        max_len, hq, qkv.stride(0), D, True, tuning, split,
    )  # fmt: skip


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    max_len: int | None = None,
    *,
    tuning: DecodeTuning = DEFAULT,
    split: int | None = None,
) -> torch.Tensor:
    """The `gqa_decode_attention` interface on the same kernel (q already normed and rotated);
    `max_len` defaults to the cache length."""
    B, hq, D = q.shape
    assert q.stride(2) == 1, "q's last dim must be contiguous"
    _check_attention(q, k_cache, v_cache, seq_lens)
    out = layer.attention(
        q, None, None, q, q, seq_lens, k_cache, v_cache, seq_lens, scale, 0.0,
        k_cache.shape[2] if max_len is None else max_len, hq, q.stride(0), q.stride(1),
        False, tuning, split,
    )  # fmt: skip
    return out.view(B, hq, D)


def _check_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seq_lens: torch.Tensor
) -> None:
    B = seq_lens.shape[0]
    cache_b, _, _, D = k_cache.shape
    assert cache_b == B and v_cache.shape == k_cache.shape, (tuple(k_cache.shape), B)
    assert D >= 32 and next_pow2(D) == D, f"head_dim {D} must be a power of two >= 32"
    assert k_cache.stride(3) == 1 and v_cache.stride(3) == 1, "cache rows must be contiguous"
    assert k_cache.dtype == v_cache.dtype == q.dtype, (k_cache.dtype, q.dtype)
    assert seq_lens.dtype == torch.int32


def _head(
    x: torch.Tensor, norm_weight: torch.Tensor, lm_head: torch.Tensor, eps: float,
    logits: torch.Tensor | None, keys: torch.Tensor | None, tuning: DecodeTuning,
) -> None:  # fmt: skip
    """The normed lm_head GEMV: into `logits` [M, V] if given, and each row's argmax key
    (kernels/gemv.py `argmax_key`) atomically maxed into `keys` [M] if given."""
    from evokernel.kernels.gemv import norm_head_kernel

    V, K = lm_head.shape
    M = check_rows(x, K)
    assert norm_weight.shape == (K,) and lm_head.stride(1) == 1 and x.dtype == lm_head.dtype
    if tuning.cuda_rows_head and _cuda_rows(x, lm_head, norm_weight, rows_cuda.OP_HEAD, tuning):
        rows_cuda.launch(rows_cuda.OP_HEAD, x, lm_head, logits, norm_weight=norm_weight, eps=eps,
                         keys=keys, pdl=tuning.pdl, warps=tuning.cuda_rows_warps)  # fmt: skip
        return
    if tuning.rows_min <= M:
        layer._rows(x, norm_weight, lm_head, None, logits, None, keys, eps, V, tuning,
                    norm=True, epilogue=3, write_logits=logits is not None)  # fmt: skip
        return
    block_n = layer.gemv_block_n(V, K, lm_head.element_size(), x.device, tuning)
    block_k = next_pow2(K)
    out = logits if logits is not None else x  # an unused pointer argument
    norm_head_kernel[(-(-V // block_n),)](
        x, norm_weight, lm_head, keys if keys is not None else out, out, M, V,
        x.stride(0), lm_head.stride(0), out.stride(0), eps,
        K=K, BLOCK_M=M, BLOCK_N=block_n, BLOCK_K=block_k, WRITE_LOGITS=logits is not None,
        ARGMAX=keys is not None, PDL=tuning.pdl,
        num_warps=layer.gemv_warps(block_n, block_k, tuning), launch_pdl=tuning.pdl,
    )  # fmt: skip


def norm_logits(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    lm_head: Weight,
    eps: float,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> torch.Tensor:
    if isinstance(lm_head, PackedWeight):
        return quant.norm_logits(x, norm_weight, lm_head, eps, tuning=tuning)
    assert isinstance(lm_head, torch.Tensor)
    logits = torch.empty((x.shape[0], lm_head.shape[0]), device=x.device, dtype=torch.float32)
    _head(x, norm_weight, lm_head, eps, logits, None, tuning)
    return logits


def greedy_head(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    lm_head: Weight,
    eps: float,
    tokens: torch.Tensor,
    positions: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    tuning: DecodeTuning = DEFAULT,
) -> None:
    """Two launches: the head folds each program's max/argmax into one int64 key per row (an
    atomic max on a kept zeroed buffer, `argmax_keys`), then one small program reads the keys,
    writes the tokens, zeroes the keys and advances positions and seq_lens. Two greedy heads
    must not run concurrently on one device."""
    from evokernel.kernels.gemv import argmax_finish_kernel

    M = x.shape[0]
    assert tokens.shape == (M,) and tokens.dtype == torch.int64
    assert positions.shape == (M,) and seq_lens.shape == (M,)
    V = lm_head.shape[0]
    assert V <= ARGMAX_MAX_VOCAB, f"greedy argmax takes up to {ARGMAX_MAX_VOCAB} ids, got {V}"
    keys = argmax_keys(x.device, MAX_ROWS)
    if isinstance(lm_head, PackedWeight):
        quant.head_keys(x, norm_weight, lm_head, eps, keys, tuning=tuning)
    else:
        assert isinstance(lm_head, torch.Tensor)
        _head(x, norm_weight, lm_head, eps, None, keys, tuning)
    argmax_finish_kernel[(1,)](
        keys, tokens, positions, seq_lens, M,
        BLOCK_M=next_pow2(M), ADVANCE=True, PDL=tuning.pdl, num_warps=1 if M <= 32 else 4,
        launch_pdl=tuning.pdl,
    )  # fmt: skip
