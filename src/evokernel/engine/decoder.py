"""The decoder forward pass as a fixed sequence of named ops (wiring only; numerics live in ops/).

One class for every family of model/families.py: what differs (q/k/v biases, q/k norms, the
RoPE rule, a tied head) is in the `ModelConfig` and the typed `LayerWeights`, whose absent
parts are None and are passed on as such; the ops take them as switches.

Prefill, per layer, for N = B*T tokens (H hidden, D head_dim, I intermediate):

  normed                       [N, H]   rms_norm(h, input_norm)   (fused into the previous add)
  qkv    = linear(normed, qkv_proj, qkv_bias)            [N, (Hq+2Hkv)*D]
  q      = qk_norm_rope_append(qkv, ...)                 [B, T, Hq, D]; K, V -> cache at positions
  attn   = prefill_attention                             [B, T, Hq, D]
  o      = linear(attn, o_proj)                          [N, H]
  h, normed = residual_add(o, h, post_attn_norm)
  act    = silu_mul(linear(normed, gate_up_proj))        [N, I]
  h, normed = residual_add(linear(act, down_proj), h, next layer's input_norm | final_norm)

then logits(normed, lm_head) -> [B, V] float32 at each sequence's last real token.

Decode (one token per sequence at its own position, B rows) carries the residual stream h
[B, H] un-normalised and calls one op per layer, `h = decode_layer(h, **layer.kwargs(), cos=,
sin=, positions=, k_cache=, v_cache=, seq_lens=, scale=, eps=, max_len=)`, which by default is
the five fused ops (ops/compose.py):

  qkv  = norm_linear(h, input_norm, qkv_proj, eps, qkv_bias)
  attn = decode_attention_qkv(qkv, q_norm, k_norm, cos, sin, positions, K, V, seq_lens, ...)
  linear_residual(attn, o_proj, h)                       h += o_proj(attn)
  act  = norm_gate_up_silu(h, post_attn_norm, gate_up_proj)
  linear_residual(act, down_proj, h)                     h += down_proj(act)

and may be a kernel pack's program for the context bucket (evokernel.engine.packs). At batch 1
with a bound up to the op set's `DecodeTuning.persistent_max`, every layer runs instead in one
persistent launch (ops/persistent.py: same contract, where it applies).

then norm_logits(h, final_norm, lm_head) -> [B, V] float32 (`decode`), or greedy_head, which
writes argmax into `tokens` and advances positions and seq_lens (`decode_greedy`). Nothing syncs
with the host, so decode can be captured in a CUDA graph (engine/graph.py). `max_len` is a
host-side bound on seq_lens (default: the cache length) that attention sizes its work by.
"""

from __future__ import annotations

from typing import Any

import torch

from evokernel.engine.cache import KVCache
from evokernel.model.config import ModelConfig
from evokernel.model.weights import ModelWeights
from evokernel.ops.registry import OpSet
from evokernel.ops.rope import rope_table


class DecoderModel:
    """Weights + op set + RoPE tables for positions 0..max_seq_len-1."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(
        self, cfg: ModelConfig, weights: ModelWeights, ops: OpSet, max_seq_len: int | None = None
    ) -> None:
        assert len(weights.layers) == cfg.num_hidden_layers, "weights do not match the config"
        self.cfg = cfg
        self.weights = weights
        self.ops = ops
        self.max_seq_len = max_seq_len or cfg.max_position_embeddings
        self.cos, self.sin = rope_table(
            cfg.head_dim, cfg.rope_theta, self.max_seq_len, weights.device, cfg.rope_scaling
        )  # [P, D/2] float32 each
        self.scale = cfg.head_dim**-0.5
        self._persistent: dict[tuple[int, Any], tuple[KVCache, Any]] = {}

    @property
    def device(self) -> torch.device:
        return self.weights.device

    @property
    def dtype(self) -> torch.dtype:
        return self.weights.dtype

    def new_cache(self, batch: int, max_seq_len: int) -> KVCache:
        assert max_seq_len <= self.max_seq_len, (max_seq_len, self.max_seq_len)
        return KVCache.allocate(self.cfg, batch, max_seq_len, self.device, self.dtype)

    def prefill(self, ids: torch.Tensor, lengths: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """ids [B, T] int64 (right-padded), lengths [B] int64 (1..T) -> logits [B, V] float32.

        Writes cache positions 0..T-1 of rows 0..B-1 (padding writes junk past each length)."""
        B, T = ids.shape
        assert cache.max_seq_len >= T, (
            f"prompt of {T} tokens exceeds the cache's {cache.max_seq_len}"
        )
        positions = torch.arange(T, device=ids.device, dtype=torch.int32).expand(B, T)
        normed = self._prefill_layers(ids, positions.contiguous(), cache)  # [B*T, H]
        last = torch.arange(B, device=ids.device) * T + (lengths - 1)  # [B] row of last token
        return self.ops.logits(normed[last], self.weights.lm_head)

    def decode(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        seq_lens: torch.Tensor,
        cache: KVCache,
        max_len: int | None = None,
    ) -> torch.Tensor:
        """tokens [B] int64, positions [B] int32, seq_lens [B] int32 (= positions + 1)
        -> logits [B, V] float32. Writes cache position positions[b] of row b."""
        h = self._decode_layers(tokens, positions, seq_lens, cache, max_len)
        w = self.weights
        return self.ops.norm_logits(h, w.final_norm, w.lm_head, self.cfg.rms_norm_eps)

    def decode_greedy(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        seq_lens: torch.Tensor,
        cache: KVCache,
        max_len: int | None = None,
    ) -> None:
        """One greedy step in place: tokens <- argmax of the next logits; positions and
        seq_lens advance by one."""
        h = self._decode_layers(tokens, positions, seq_lens, cache, max_len)
        w = self.weights
        self.ops.greedy_head(
            h, w.final_norm, w.lm_head, self.cfg.rms_norm_eps, tokens, positions, seq_lens
        )

    def _decode_layers(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        seq_lens: torch.Tensor,
        cache: KVCache,
        max_len: int | None,
    ) -> torch.Tensor:
        """The residual stream after the last layer, [B, H] (not normalised)."""
        B = tokens.shape[0]
        assert cache.batch == B, (B, cache.batch)
        ops, w, eps = self.ops, self.weights, self.cfg.rms_norm_eps
        bound = cache.max_seq_len if max_len is None else min(max_len, cache.max_seq_len)
        persistent = self._persistent_layers(cache, bound)
        if persistent is not None:
            return persistent(tokens, positions, seq_lens, bound)  # type: ignore[no-any-return]
        h = ops.embed(w.embed_tokens, tokens)  # [B, H]
        for i, layer in enumerate(w.layers):
            h = ops.decode_layer(
                h,
                **layer.kwargs(),
                cos=self.cos,
                sin=self.sin,
                positions=positions,
                k_cache=cache.k[i],
                v_cache=cache.v[i],
                seq_lens=seq_lens,
                scale=self.scale,
                eps=eps,
                max_len=bound,
            )  # fmt: skip  [B, H]
        return h

    def _persistent_layers(self, cache: KVCache, bound: int) -> Any:
        """The persistent step for this cache where the op set asks for it at this bound and
        it applies (built once per cache), else None."""
        if cache.batch != 1:
            return None
        tuning = self.ops.decode_tuning()
        if tuning is None or bound > tuning.persistent_max:
            return None
        key = (id(cache), tuning)
        if key not in self._persistent:
            from evokernel.ops.persistent import PersistentLayers

            layers = PersistentLayers.build(
                self.cfg, self.weights, cache, self.cos, self.sin, tuning
            )
            self._persistent[key] = (cache, layers)
        return self._persistent[key][1]

    def _prefill_layers(
        self, ids: torch.Tensor, positions: torch.Tensor, cache: KVCache
    ) -> torch.Tensor:
        """ids [B, T], positions [B, T] int32 -> final-normed hidden states [B*T, H]."""
        ops, w, eps = self.ops, self.weights, self.cfg.rms_norm_eps
        B, T = ids.shape
        N = B * T
        h = ops.embed(w.embed_tokens, ids.reshape(N))  # [N, H]
        normed = ops.rms_norm(h, w.layers[0].input_norm, eps)
        for i, layer in enumerate(w.layers):
            qkv = ops.linear(normed, layer.qkv_proj, layer.qkv_bias)  # [N, (Hq+2Hkv)*D]
            q = ops.qk_norm_rope_append(
                qkv.view(B, T, -1), layer.q_norm, layer.k_norm, self.cos, self.sin,
                positions, cache.k[i], cache.v[i], eps,
            )  # fmt: skip
            attn = ops.prefill_attention(q, cache.k[i][:B], cache.v[i][:B], self.scale)
            o = ops.linear(attn.reshape(N, -1), layer.o_proj)  # [N, H]
            h, normed = ops.residual_add(o, h, layer.post_attn_norm, eps)
            act = ops.silu_mul(ops.linear(normed, layer.gate_up_proj))  # [N, I]
            down = ops.linear(act, layer.down_proj)  # [N, H]
            after = w.layers[i + 1].input_norm if i + 1 < len(w.layers) else w.final_norm
            h, normed = ops.residual_add(down, h, after, eps)
        return normed
