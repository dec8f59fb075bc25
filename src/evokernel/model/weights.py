"""The in-memory weight layout the engine consumes.

Projections that read the same input are packed into one matrix, so a decode step runs four
matrix-vector products per layer (the shapes of the `decode_linear` task):

  qkv_proj      [(Hq + 2*Hkv) * D, H]  rows: q_proj, then k_proj, then v_proj
  gate_up_proj  [2 * I, H]             rows: gate_proj, then up_proj

`HF_TENSOR_MAP` says where each Hugging Face tensor goes; the loader copies every tensor from
the memory-mapped safetensors file straight into its slice of the device tensor, one tensor at
a time, so host RAM never holds a second full copy of the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evokernel.model.config import Qwen3Config


@dataclass
class LayerWeights:
    input_norm: torch.Tensor  # [H]
    qkv_proj: torch.Tensor  # [(Hq + 2*Hkv) * D, H]
    q_norm: torch.Tensor  # [D]
    k_norm: torch.Tensor  # [D]
    o_proj: torch.Tensor  # [H, Hq * D]
    post_attn_norm: torch.Tensor  # [H]
    gate_up_proj: torch.Tensor  # [2 * I, H]
    down_proj: torch.Tensor  # [H, I]


@dataclass
class Qwen3Weights:
    embed_tokens: torch.Tensor  # [V, H]
    layers: list[LayerWeights]
    final_norm: torch.Tensor  # [H]
    lm_head: torch.Tensor  # [V, H]; the same tensor object as embed_tokens when tied

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.dtype

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.device

    def nbytes(self) -> int:
        """Bytes of distinct weight storage (a tied lm_head counts once)."""
        seen: set[int] = set()
        total = 0
        tensors = [self.embed_tokens, self.final_norm, self.lm_head]
        for layer in self.layers:
            tensors.extend(vars(layer).values())
        for t in tensors:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
        return total


# HF name pattern -> (field, packed part). `{i}` is the layer index. A packed part says which
# block of rows the tensor fills: ("q", "k", "v") inside qkv_proj, ("gate", "up") inside
# gate_up_proj; None means the tensor is the whole field.
HF_TENSOR_MAP: dict[str, tuple[str, str | None]] = {
    "model.embed_tokens.weight": ("embed_tokens", None),
    "model.norm.weight": ("final_norm", None),
    "lm_head.weight": ("lm_head", None),
    "model.layers.{i}.input_layernorm.weight": ("input_norm", None),
    "model.layers.{i}.self_attn.q_proj.weight": ("qkv_proj", "q"),
    "model.layers.{i}.self_attn.k_proj.weight": ("qkv_proj", "k"),
    "model.layers.{i}.self_attn.v_proj.weight": ("qkv_proj", "v"),
    "model.layers.{i}.self_attn.q_norm.weight": ("q_norm", None),
    "model.layers.{i}.self_attn.k_norm.weight": ("k_norm", None),
    "model.layers.{i}.self_attn.o_proj.weight": ("o_proj", None),
    "model.layers.{i}.post_attention_layernorm.weight": ("post_attn_norm", None),
    "model.layers.{i}.mlp.gate_proj.weight": ("gate_up_proj", "gate"),
    "model.layers.{i}.mlp.up_proj.weight": ("gate_up_proj", "up"),
    "model.layers.{i}.mlp.down_proj.weight": ("down_proj", None),
}


def hf_shapes(cfg: Qwen3Config) -> dict[str, tuple[int, ...]]:
    """Every tensor name an HF Qwen3 checkpoint holds, with its shape (lm_head only if untied)."""
    H, inter, D = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (cfg.vocab_size, H),
        "model.norm.weight": (H,),
    }
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, H)
    per_layer = {
        "input_layernorm.weight": (H,),
        "self_attn.q_proj.weight": (cfg.q_size, H),
        "self_attn.k_proj.weight": (cfg.kv_size, H),
        "self_attn.v_proj.weight": (cfg.kv_size, H),
        "self_attn.q_norm.weight": (D,),
        "self_attn.k_norm.weight": (D,),
        "self_attn.o_proj.weight": (H, cfg.q_size),
        "post_attention_layernorm.weight": (H,),
        "mlp.gate_proj.weight": (inter, H),
        "mlp.up_proj.weight": (inter, H),
        "mlp.down_proj.weight": (H, inter),
    }
    for i in range(cfg.num_hidden_layers):
        for suffix, shape in per_layer.items():
            shapes[f"model.layers.{i}.{suffix}"] = shape
    return shapes
