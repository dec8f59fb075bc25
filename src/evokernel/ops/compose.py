"""The decode step's fused ops, defined as compositions of an OpSet's plain ops.

Batch-1 decode carries the residual stream `h [B, H]` un-normalised; each consumer normalises
it itself. Shapes as in ops/reference.py (M = B rows):

  norm_linear(x [M, K], norm_weight [K], weight [N, K], eps, bias [N] | None)
                                                    = linear(rms_norm(x), weight, bias)
  linear_residual(x [M, K], weight [N, K], residual [M, N])    residual += linear(x, weight),
                                                                in place; returns residual
  norm_gate_up_silu(x [M, H], norm_weight [H], gate_up [2I, H], eps)
                                                    = silu_mul(linear(rms_norm(x), gate_up))
  decode_attention_qkv(qkv [B, (Hq+2Hkv)*D], q_norm | None, k_norm | None, cos, sin,
                       positions [B] int32, k_cache, v_cache, seq_lens [B] int32, scale, eps,
                       max_len)
      = decode_attention(qk_norm_rope_append(qkv, ...), ...) -> [B, Hq*D]; max_len >= every
        seq_lens[b] is a host-side bound (the cache past it is not passed on; kernels size
        their work by it): it changes no result
  norm_logits(x [M, H], norm_weight [H], lm_head [V, H], eps)  = logits(rms_norm(x), lm_head)
  greedy_head(x, norm_weight, lm_head, eps, tokens [B] int64, positions, seq_lens)
      tokens <- argmax(norm_logits(x, ...)) (lowest id among equals); positions += 1 and
      seq_lens += 1: the end of a greedy decode step, in place

One decoder layer's decode step, made of the fused ops above (the `decode_layer` task's entry
point, docs/layer-task.md). Everything after `h` is a keyword: the layer's weights by the
field names of model/weights.py `LayerWeights` (`LAYER_FIELDS`; the family's absent parts
None), then the step's inputs (`STEP_INPUTS`):

  decode_layer(h [B, H], *, input_norm, qkv_proj, o_proj, post_attn_norm, gate_up_proj,
               down_proj, qkv_bias, q_norm, k_norm, cos, sin, positions, k_cache, v_cache,
               seq_lens, scale, eps, max_len) -> the residual stream after the layer [B, H]
      = qkv  = norm_linear(h, input_norm, qkv_proj, eps, qkv_bias)
        attn = decode_attention_qkv(qkv, q_norm, k_norm, cos, sin, positions, k_cache,
                                    v_cache, seq_lens, scale, eps, max_len)
        linear_residual(attn, o_proj, h); act = norm_gate_up_silu(h, post_attn_norm, ...)
        linear_residual(act, down_proj, h); return h        (h is updated in place)
      A replacement (a pack's program) may return a new tensor instead: callers use the
      returned value.

`composed(ops, name)` is that composition over `ops`' plain ops: the torch OpSet's fused ops
(the references the fused kernels are tested against), and what a fused op becomes when one
of its plain parts is replaced by a candidate file, so the candidate runs in decode too.
`PARTS` says which ops each fused op contains (for `decode_layer`: its four fused ops and,
transitively, their plain ops, so replacing any of them re-composes the layer);
`LAYER_PARTS` are the ops `decode_layer` calls directly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from evokernel.model.weights import Weight
from evokernel.ops.sampling import GREEDY

# The op set the compositions look their parts up on, by attribute when called: an OpSet
# (ops/registry.py, which builds these; named here only as what it is, to keep the import
# one way).
OpSet = Any

STEP_INPUTS: tuple[str, ...] = (
    "cos", "sin", "positions", "k_cache", "v_cache", "seq_lens", "scale", "eps", "max_len",
)  # fmt: skip

PARTS: dict[str, tuple[str, ...]] = {
    "norm_linear": ("rms_norm", "linear"),
    "linear_residual": ("linear",),
    "norm_gate_up_silu": ("rms_norm", "linear", "silu_mul"),
    "decode_attention_qkv": ("qk_norm_rope_append", "decode_attention"),
    "norm_logits": ("rms_norm", "logits"),
    "greedy_head": ("rms_norm", "logits", "sample"),
}
LAYER_PARTS: tuple[str, ...] = (
    "norm_linear",
    "decode_attention_qkv",
    "linear_residual",
    "norm_gate_up_silu",
)
PARTS["decode_layer"] = tuple(
    dict.fromkeys([*LAYER_PARTS, *(p for f in LAYER_PARTS for p in PARTS[f])])
)


def composed(ops: OpSet, name: str) -> Callable[..., Any]:
    """Fused op `name` made of `ops`' plain ops (looked up when called, by attribute)."""
    if name == "norm_linear":
        return lambda x, norm_w, weight, eps, bias=None: ops.linear(
            ops.rms_norm(x, norm_w, eps), weight, bias
        )
    if name == "linear_residual":
        return lambda x, weight, residual: residual.add_(ops.linear(x, weight))
    if name == "norm_gate_up_silu":
        return lambda x, norm_w, gate_up, eps: ops.silu_mul(
            ops.linear(ops.rms_norm(x, norm_w, eps), gate_up)
        )
    if name == "norm_logits":
        return lambda x, norm_w, lm_head, eps: ops.logits(ops.rms_norm(x, norm_w, eps), lm_head)
    if name == "decode_attention_qkv":
        return lambda *args: _attention(ops, *args)
    if name == "greedy_head":
        return lambda *args: _greedy_head(ops, *args)
    if name == "decode_layer":
        return functools.partial(_layer, ops)  # keywords too: the task calls it so
    raise KeyError(name)


def _attention(
    ops: OpSet,
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
) -> torch.Tensor:
    B = qkv.shape[0]
    q = ops.qk_norm_rope_append(
        qkv.view(B, 1, -1), q_norm, k_norm, cos, sin, positions.view(B, 1), k_cache, v_cache, eps
    )  # [B, 1, Hq, D]
    n = min(max_len, k_cache.shape[2])  # only positions < max_len can be valid
    q3 = q.view(B, -1, q.shape[-1])  # [B, Hq, D]
    out = ops.decode_attention(q3, k_cache[:, :, :n], v_cache[:, :, :n], seq_lens, scale)
    return out.reshape(B, -1)


def _greedy_head(
    ops: OpSet,
    x: torch.Tensor,
    norm_w: torch.Tensor,
    lm_head: torch.Tensor,
    eps: float,
    tokens: torch.Tensor,
    positions: torch.Tensor,
    seq_lens: torch.Tensor,
) -> None:
    logits = ops.logits(ops.rms_norm(x, norm_w, eps), lm_head)
    tokens.copy_(ops.sample(logits, GREEDY, None))
    positions.add_(1)
    seq_lens.add_(1)


def _layer(
    ops: OpSet,
    h: torch.Tensor,
    *,
    input_norm: torch.Tensor,
    qkv_proj: Weight,
    o_proj: Weight,
    post_attn_norm: torch.Tensor,
    gate_up_proj: Weight,
    down_proj: Weight,
    qkv_bias: torch.Tensor | None,
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
) -> torch.Tensor:
    qkv = ops.norm_linear(h, input_norm, qkv_proj, eps, qkv_bias)  # [B, (Hq+2Hkv)*D]
    attn = ops.decode_attention_qkv(
        qkv, q_norm, k_norm, cos, sin, positions, k_cache, v_cache, seq_lens, scale, eps, max_len
    )  # [B, Hq*D]
    ops.linear_residual(attn, o_proj, h)
    act = ops.norm_gate_up_silu(h, post_attn_norm, gate_up_proj, eps)
    ops.linear_residual(act, down_proj, h)
    return h
