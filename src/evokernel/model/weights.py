"""The in-memory weight layout the engine consumes: typed layers of typed projections.

Projections that read the same input are packed into one matrix, so a decode step runs four
matrix-vector products per layer (the shapes of the `decode_linear` task):

  qkv_proj      [(Hq + 2*Hkv) * D, H]  rows: q_proj, then k_proj, then v_proj
  gate_up_proj  [2 * I, H]             rows: gate_proj, then up_proj

A projection is a `Weight`: a dense tensor in the model dtype, or a `PackedWeight` (a
quantized format: packed integer or float8 data plus scales) that the launchers dispatch on.
`LayerWeights` is one decoder layer; its field names are the keywords of the `decode_layer`
op (ops/compose.py) and of its task's entry point, listed once here (`LAYER_FIELDS`). The
family's optional parts are None where the family has none: `qkv_bias` (qwen2), `q_norm` and
`k_norm` (qwen3).

`HF_TENSOR_MAP` says where each Hugging Face tensor goes; the loader copies every tensor from
the memory-mapped safetensors file straight into its slice of the device tensor, one tensor at
a time, so host RAM never holds a second full copy of the model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import ClassVar, Union

import torch

from evokernel.model.config import ModelConfig


class PackedWeight(ABC):
    """A projection [out_features, in_features] stored in a packed (quantized) format.

    Subclasses (model/quant/) hold their tensors as attributes and say how to read them back:
    `dequantize(dtype)` is the reference every kernel of the format is tested against."""

    format: ClassVar[str] = "packed"

    @property
    @abstractmethod
    def shape(self) -> tuple[int, int]:
        """[out_features, in_features]."""

    @abstractmethod
    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor the format stores, by name (what the GPU reads per token)."""

    @abstractmethod
    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """The projection as a dense [N, K] tensor of `dtype`."""

    @property
    def device(self) -> torch.device:
        return next(iter(self.tensors().values())).device

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())


Weight = Union[torch.Tensor, PackedWeight]  # noqa: UP007  (a runtime alias, read by isinstance)


def weight_nbytes(w: Weight) -> int:
    if isinstance(w, torch.Tensor):
        return w.numel() * w.element_size()
    return w.nbytes()


def dense(w: Weight, dtype: torch.dtype) -> torch.Tensor:
    """The projection as a dense [N, K] tensor of `dtype` (a packed one dequantized)."""
    if isinstance(w, torch.Tensor):
        return w if w.dtype == dtype else w.to(dtype)
    return w.dequantize(dtype)


def storage(w: Weight | None) -> list[torch.Tensor]:
    """The tensors behind a weight (none for an absent optional one)."""
    if w is None:
        return []
    return [w] if isinstance(w, torch.Tensor) else list(w.tensors().values())


@dataclass
class LayerWeights:
    input_norm: torch.Tensor  # [H]
    qkv_proj: Weight  # [(Hq + 2*Hkv) * D, H]
    o_proj: Weight  # [H, Hq * D]
    post_attn_norm: torch.Tensor  # [H]
    gate_up_proj: Weight  # [2 * I, H]
    down_proj: Weight  # [H, I]
    qkv_bias: torch.Tensor | None = None  # [(Hq + 2*Hkv) * D]: qwen2
    q_norm: torch.Tensor | None = None  # [D]: qwen3
    k_norm: torch.Tensor | None = None  # [D]: qwen3

    def kwargs(self) -> dict[str, Weight | None]:
        """The layer as the `decode_layer` op's keyword arguments."""
        return {name: getattr(self, name) for name in LAYER_FIELDS}


LAYER_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(LayerWeights))
PROJECTIONS: tuple[str, ...] = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


@dataclass
class ModelWeights:
    embed_tokens: torch.Tensor  # [V, H]
    layers: list[LayerWeights]
    final_norm: torch.Tensor  # [H]
    lm_head: Weight  # [V, H]; the same tensor object as embed_tokens when tied (and dense)

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
        tensors = [self.embed_tokens, self.final_norm, *storage(self.lm_head)]
        for layer in self.layers:
            for value in vars(layer).values():
                tensors.extend(storage(value))
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
    "model.layers.{i}.self_attn.q_proj.bias": ("qkv_bias", "q"),
    "model.layers.{i}.self_attn.k_proj.bias": ("qkv_bias", "k"),
    "model.layers.{i}.self_attn.v_proj.bias": ("qkv_bias", "v"),
    "model.layers.{i}.self_attn.q_norm.weight": ("q_norm", None),
    "model.layers.{i}.self_attn.k_norm.weight": ("k_norm", None),
    "model.layers.{i}.self_attn.o_proj.weight": ("o_proj", None),
    "model.layers.{i}.post_attention_layernorm.weight": ("post_attn_norm", None),
    "model.layers.{i}.mlp.gate_proj.weight": ("gate_up_proj", "gate"),
    "model.layers.{i}.mlp.up_proj.weight": ("gate_up_proj", "up"),
    "model.layers.{i}.mlp.down_proj.weight": ("down_proj", None),
}


def hf_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name an HF checkpoint of `cfg`'s family holds, with its shape (lm_head only
    if untied; biases and q/k norms only where the family has them)."""
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
        "self_attn.o_proj.weight": (H, cfg.q_size),
        "post_attention_layernorm.weight": (H,),
        "mlp.gate_proj.weight": (inter, H),
        "mlp.up_proj.weight": (inter, H),
        "mlp.down_proj.weight": (H, inter),
    }
    if cfg.qkv_bias:
        per_layer |= {
            "self_attn.q_proj.bias": (cfg.q_size,),
            "self_attn.k_proj.bias": (cfg.kv_size,),
            "self_attn.v_proj.bias": (cfg.kv_size,),
        }
    if cfg.qk_norm:
        per_layer |= {"self_attn.q_norm.weight": (D,), "self_attn.k_norm.weight": (D,)}
    for i in range(cfg.num_hidden_layers):
        for suffix, shape in per_layer.items():
            shapes[f"model.layers.{i}.{suffix}"] = shape
    return shapes
