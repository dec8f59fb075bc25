"""The decoder (any family of model/families.py) as a PyTorch user writes it in the style of
gpt-fast's `model.py`: plain modules, packed projections, a static KV cache, and one decode
function for `torch.compile`. The family's parts follow the config as gpt-fast's per-model
`ModelArgs` do: q/k/v bias (qwen2), q/k RMSNorm (qwen3), the RoPE scaling rule (llama3).

    model = Transformer.from_weights(cfg, weights)           # the checkpoint's tensors, no copy
    cache = KVCache.allocate(cfg, cache_len, device, dtype)  # [1, Hkv, S, D] per layer, zeros
    logits = model(ids [1, T], input_pos [T], cache)         # prefill from 0 -> [1, V] float32
    token = decode_one_token(model, token [1, 1], input_pos [1], cache)   # -> [1, 1] int64

Numerics follow transformers (norms in float32 rounded back to the model dtype, RoPE tables in
float32, softmax in float32), so in float32 it matches transformers to rounding noise. Packed
(quantized) projections are dequantized once here: the baseline reads dense weights.

Attention: prefill (positions 0..T-1) is flash SDPA over the cache's first T positions.
Decode is written out (q k^T, softmax, p v), as gpt-fast runs decode attention through SDPA's
math path so that Inductor generates it; the query heads sharing a KV head are grouped
(`[1, Hkv, G, D]`), so the cache is read once per KV head and never repeated in memory. The
mask `arange(S) <= input_pos` keeps steps capturable in a CUDA graph, and the cache is
zero-filled so the masked positions are finite.

Unlike gpt-fast, the cache is an argument rather than a module buffer: the benchmark sizes a
fresh cache for each context position and marks its length dynamic, so one compile serves all.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from evokernel.model.config import ModelConfig
from evokernel.model.weights import LayerWeights, ModelWeights, Weight, dense
from evokernel.ops.rope import inverse_frequencies


@dataclass
class KVCache:
    k: list[torch.Tensor]  # per layer [1, Hkv, S, D]
    v: list[torch.Tensor]

    @classmethod
    def allocate(
        cls, cfg: ModelConfig, length: int, device: torch.device, dtype: torch.dtype
    ) -> KVCache:
        shape = (1, cfg.num_key_value_heads, length, cfg.head_dim)
        n = cfg.num_hidden_layers
        return cls(
            k=[torch.zeros(shape, device=device, dtype=dtype) for _ in range(n)],
            v=[torch.zeros(shape, device=device, dtype=dtype) for _ in range(n)],
        )

    def tensors(self) -> list[torch.Tensor]:
        return [*self.k, *self.v]


def linear(
    x: torch.Tensor, w: torch.Tensor | nn.Module, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x @ w^T (+ bias) for a weight Parameter, or a weight module's own product (gpt-fast's
    `WeightOnlyInt8Linear`, bench/systems/gptfast_int8.py, swapped in for the Parameter)."""
    if isinstance(w, nn.Module):
        y = w(x)
        return y if bias is None else y + bias
    return F.linear(x, w, bias)


def _param(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t, requires_grad=False)


def _weight(w: Weight, dtype: torch.dtype) -> nn.Parameter:
    return _param(dense(w, dtype))


class RMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.weight = _param(weight)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: LayerWeights, dtype: torch.dtype) -> None:
        super().__init__()
        self.wqkv = _weight(layer.qkv_proj, dtype)  # [(Hq + 2 Hkv) D, H]
        self.bqkv = None if layer.qkv_bias is None else _param(layer.qkv_bias)
        self.wo = _weight(layer.o_proj, dtype)  # [H, Hq D]
        self.q_norm = self.k_norm = None
        if layer.q_norm is not None and layer.k_norm is not None:
            self.q_norm = RMSNorm(layer.q_norm, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(layer.k_norm, cfg.rms_norm_eps)
        self.n_head, self.n_kv, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        self.scale = cfg.head_dim**-0.5

    def forward(
        self,
        x: torch.Tensor,  # [1, T, H]
        cos: torch.Tensor,  # [T, D] in x's dtype
        sin: torch.Tensor,
        input_pos: torch.Tensor,  # [T] int64
        k_cache: torch.Tensor,  # [1, Hkv, S, D]
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        B, T, _ = x.shape
        D, hq, hkv = self.head_dim, self.n_head, self.n_kv
        q, k, v = linear(x, self.wqkv, self.bqkv).split([hq * D, hkv * D, hkv * D], dim=-1)
        q, k = q.view(B, T, hq, D), k.view(B, T, hkv, D)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # [B, Hq, T, D], [B, Hkv, T, D]
        v = v.view(B, T, hkv, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k_cache.index_copy_(2, input_pos, k)
        v_cache.index_copy_(2, input_pos, v)
        if T == 1:
            y = self._decode(q, k_cache, v_cache, input_pos)
        else:  # prefill from position 0: causal over the first T cache positions
            y = F.scaled_dot_product_attention(
                q, k_cache[:, :, :T], v_cache[:, :, :T], is_causal=True, scale=self.scale,
                enable_gqa=True,
            )  # fmt: skip
        y = y.transpose(1, 2).reshape(B, T, hq * D)
        return linear(y, self.wo)

    def _decode(self, q, k_cache, v_cache, input_pos) -> torch.Tensor:
        S = k_cache.shape[2]
        G = self.n_head // self.n_kv
        qg = q.reshape(1, self.n_kv, G, self.head_dim)  # query head h reads kv head h // G
        scores = torch.matmul(qg, k_cache.transpose(-1, -2)) * self.scale  # [1, Hkv, G, S]
        valid = torch.arange(S, device=q.device) <= input_pos  # [S]
        scores = scores.masked_fill(~valid, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(probs, v_cache).view(1, self.n_head, 1, self.head_dim)


class FeedForward(nn.Module):
    def __init__(self, w13: Weight, w2: Weight, dtype: torch.dtype) -> None:
        super().__init__()
        self.w13 = _weight(w13, dtype)  # [2 I, H]: gate rows, then up rows
        self.w2 = _weight(w2, dtype)  # [H, I]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = linear(x, self.w13).chunk(2, dim=-1)
        return linear(F.silu(gate) * up, self.w2)


class TransformerBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: LayerWeights) -> None:
        super().__init__()
        dtype = layer.input_norm.dtype
        self.attention_norm = RMSNorm(layer.input_norm, cfg.rms_norm_eps)
        self.attention = Attention(cfg, layer, dtype)
        self.ffn_norm = RMSNorm(layer.post_attn_norm, cfg.rms_norm_eps)
        self.feed_forward = FeedForward(layer.gate_up_proj, layer.down_proj, dtype)

    def forward(self, x, cos, sin, input_pos, k_cache, v_cache) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin, input_pos, k_cache, v_cache)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, weights: ModelWeights) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = _param(weights.embed_tokens)  # [V, H]
        self.layers = nn.ModuleList(TransformerBlock(cfg, layer) for layer in weights.layers)
        self.norm = RMSNorm(weights.final_norm, cfg.rms_norm_eps)
        self.output = _weight(weights.lm_head, weights.dtype)  # tok_embeddings' tensor if tied
        cos, sin = rope_tables(cfg, weights.device)
        self.cos_table: torch.Tensor  # [P, D] float32
        self.sin_table: torch.Tensor
        self.register_buffer("cos_table", cos, persistent=False)
        self.register_buffer("sin_table", sin, persistent=False)

    @classmethod
    def from_weights(cls, cfg: ModelConfig, weights: ModelWeights) -> Transformer:
        return cls(cfg, weights).eval()

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """idx [1, T], input_pos [T] -> logits of the last position [1, V] float32."""
        x = F.embedding(idx, self.tok_embeddings)  # [1, T, H]
        cos = self.cos_table[input_pos].to(x.dtype)  # [T, D]
        sin = self.sin_table[input_pos].to(x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, input_pos, cache.k[i], cache.v[i])
        return linear(self.norm(x[:, -1]), self.output).float()


def rope_tables(cfg: ModelConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [max_position_embeddings, D] float32, computed as transformers computes them."""
    inv_freq = inverse_frequencies(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, device)
    pos = torch.arange(cfg.max_position_embeddings, device=device, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def decode_one_token(
    model: Transformer, token: torch.Tensor, input_pos: torch.Tensor, cache: KVCache
) -> torch.Tensor:
    """token [1, 1] at input_pos [1] -> the greedy next token [1, 1] int64 (the compiled step)."""
    logits = model(token, input_pos, cache)
    return logits.argmax(dim=-1, keepdim=True)
