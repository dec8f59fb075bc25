"""Named model shapes for random checkpoints (`evokernel model random --preset NAME`).

The `qwen3-*`, `qwen2.5-*`, `llama-3.2-*` and `smollm2-*` presets copy the architecture of the
published checkpoints exactly (their config.json: shapes, RoPE and its scaling, norm epsilon,
tied head; weights aside). The `tiny*` presets keep every structural feature of their family
that a kernel could get wrong at a size whose whole forward pass runs in milliseconds under
the Triton interpreter: `tiny` (qwen3: GQA 2:1, q width != hidden size, QK-norm, tied),
`tiny-qwen2` (q/k/v biases, head_dim 64-like hidden/heads), `tiny-llama` (`llama3` RoPE
scaling, GQA 4:1, untied head).

Special tokens follow Qwen3: `<|endoftext|>` (bos, and a second eos in generation_config.json),
`<|im_start|>`, `<|im_end|>` (eos). A preset whose vocabulary holds Qwen's ids keeps them;
otherwise they take ids 256-258, right after the 256 byte tokens.
"""

from __future__ import annotations

from typing import Any

from evokernel.model.rope import RopeScaling

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
QWEN_SPECIAL_IDS = (151643, 151644, 151645)
SMALL_SPECIAL_IDS = (256, 257, 258)
MIN_VOCAB = 259  # 256 byte tokens + 3 special tokens

_QWEN3_COMMON: dict[str, Any] = {
    "model_type": "qwen3",
    "vocab_size": 151936,
    "head_dim": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0,
    "max_position_embeddings": 40960,
}

_QWEN2_COMMON: dict[str, Any] = {
    "model_type": "qwen2",
    "vocab_size": 151936,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}

_LLAMA32_COMMON: dict[str, Any] = {
    "model_type": "llama",
    "vocab_size": 128256,
    "intermediate_size": 8192,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500_000.0,
    "rope_scaling": RopeScaling("llama3", 32.0, 1.0, 4.0, 8192),
    "max_position_embeddings": 131072,
    "tie_word_embeddings": True,
}

_SMOLLM2_COMMON: dict[str, Any] = {
    "model_type": "llama",
    "vocab_size": 49152,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": True,
}

PRESETS: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": _QWEN3_COMMON
    | {
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "tie_word_embeddings": True,
    },
    "qwen3-1.7b": _QWEN3_COMMON
    | {
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "tie_word_embeddings": True,
    },
    "qwen3-4b": _QWEN3_COMMON
    | {
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "tie_word_embeddings": True,
    },
    "qwen3-8b": _QWEN3_COMMON
    | {
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "tie_word_embeddings": False,
    },
    "qwen3-14b": _QWEN3_COMMON
    | {
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "tie_word_embeddings": False,
    },
    "qwen2.5-0.5b": _QWEN2_COMMON
    | {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "head_dim": 64,
    },
    "qwen2.5-1.5b": _QWEN2_COMMON
    | {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "head_dim": 128,
    },
    "llama-3.2-1b": _LLAMA32_COMMON
    | {
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "head_dim": 64,
    },
    "llama-3.2-3b": _LLAMA32_COMMON
    | {
        "hidden_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 24,
        "head_dim": 128,
    },
    "smollm2-135m": _SMOLLM2_COMMON
    | {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "rope_theta": 100_000.0,
    },
    "smollm2-360m": _SMOLLM2_COMMON
    | {
        "hidden_size": 960,
        "intermediate_size": 2560,
        "num_hidden_layers": 32,
        "num_attention_heads": 15,
        "num_key_value_heads": 5,
        "head_dim": 64,
        "rope_theta": 100_000.0,
    },
    "smollm2-1.7b": _SMOLLM2_COMMON
    | {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "head_dim": 64,
        "rope_theta": 130_000.0,
    },
    "tiny-qwen2": _QWEN2_COMMON
    | {
        "vocab_size": 512,
        "hidden_size": 64,
        "intermediate_size": 160,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 4096,
    },
    "tiny-llama": _LLAMA32_COMMON
    | {
        "vocab_size": 512,
        "hidden_size": 128,
        "intermediate_size": 192,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        # llama3 scaling over a short original context, so that it bends frequencies inside
        # the positions tests reach
        "rope_scaling": RopeScaling("llama3", 8.0, 1.0, 4.0, 256),
    },
    "tiny": {
        "model_type": "qwen3",
        "vocab_size": 512,
        "hidden_size": 64,
        "intermediate_size": 192,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1_000_000.0,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
    },
}


def special_token_ids(vocab_size: int) -> tuple[int, int, int]:
    """Ids of (`<|endoftext|>`, `<|im_start|>`, `<|im_end|>`) in a vocabulary of this size."""
    ids = QWEN_SPECIAL_IDS if vocab_size > max(QWEN_SPECIAL_IDS) else SMALL_SPECIAL_IDS
    return ids[0], ids[1], ids[2]
