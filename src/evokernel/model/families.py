"""The decoder-only families the engine runs, as one table: what differs between them.

Every family here is the same block (pre-norm RMSNorm, GQA attention with rotate-half RoPE,
SiLU-gated MLP, RMSNorm before the head); they differ in a few switches, all read from this
table by `ModelConfig` parsing and by `to_hf_dict`:

| model_type | q/k/v bias            | q/k RMSNorm | head_dim if absent | sliding window (refused) |
| ---------- | --------------------- | ----------- | ------------------ | ------------------------ |
| qwen3      | `attention_bias` (no) | yes         | 128                | `use_sliding_window`     |
| qwen2      | always                | no          | hidden / heads     | `use_sliding_window`     |
| llama      | `attention_bias` (no) | no          | hidden / heads     | never                    |
| mistral    | never                 | no          | hidden / heads     | `sliding_window` set     |

`attention_bias: true` puts a bias on o_proj too in qwen3 and llama, which no kernel here
adds: refused, as is `mlp_bias`. Defaults for absent keys are transformers' own (5.x), so a
sparse config.json builds the model transformers would. SmolLM2 ships as `llama`.

Adding a family that fits this block is one row here, one `architectures` name and, for a new
switch, a field in `ModelConfig` and a compile-time switch in the layer kernels
(docs/architecture.md, "Adding a model family").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    model_type: str
    architecture: str  # transformers' class name, written to config.json's `architectures`
    qkv_bias: bool | None  # True/False fixed by the family; None: `attention_bias` decides
    qk_norm: bool
    head_dim: int | None  # default when config.json omits it; None: hidden_size // heads
    kv_heads: int | None  # default `num_key_value_heads`; None: num_attention_heads
    max_positions: int  # default `max_position_embeddings`
    sliding_key: str | None  # the key that switches a sliding window on (refused), if any
    sliding_default: int | None = None  # `sliding_window` when absent (mistral: 4096)


_QWEN_WINDOW = "use_sliding_window"
FAMILIES: dict[str, Family] = {
    "qwen3": Family("qwen3", "Qwen3ForCausalLM", None, True, 128, 32, 32768, _QWEN_WINDOW),
    "qwen2": Family("qwen2", "Qwen2ForCausalLM", True, False, None, 32, 32768, _QWEN_WINDOW),
    "llama": Family("llama", "LlamaForCausalLM", None, False, None, None, 2048, None),
    "mistral": Family(
        "mistral", "MistralForCausalLM", False, False, None, 8, 131072, "sliding_window", 4096
    ),
}
SUPPORTED_MODEL_TYPES = tuple(sorted(FAMILIES))

# Families people ask for that this block does not describe, with the reason given.
REFUSED_FAMILIES: dict[str, str] = {
    "qwen3_moe": "mixture-of-experts layers",
    "qwen2_moe": "mixture-of-experts layers",
    "mixtral": "mixture-of-experts layers",
    "gemma": "gemma's norm offset and GeLU MLP",
    "gemma2": "gemma's norm offset, soft-capping and sliding windows",
    "gemma3": "gemma's norm offset, soft-capping and sliding windows",
    "phi3": "fused qkv/gate_up checkpoints and su-scaled RoPE",
}


def family(model_type: object, source: str) -> Family:
    """The family of `model_type`; a one-line CheckpointError naming what is supported."""
    from evokernel.errors import CheckpointError

    if isinstance(model_type, str) and model_type in FAMILIES:
        return FAMILIES[model_type]
    why = REFUSED_FAMILIES.get(model_type) if isinstance(model_type, str) else None
    reason = f" ({why} are not supported)" if why else ""
    raise CheckpointError(
        f"{source}: unsupported model_type {model_type!r}{reason}; "
        f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
    )
