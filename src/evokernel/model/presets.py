"""Named model shapes for random checkpoints (`evokernel model random --preset NAME`).

The `qwen3-*` presets copy the architecture of the published Qwen3 dense checkpoints exactly
(their config.json, weights aside). `tiny` keeps every structural feature of Qwen3-0.6B that a
kernel could get wrong (GQA 2:1, q width != hidden size, QK-norm, tied embeddings) at a size
whose whole forward pass runs in milliseconds under the Triton interpreter.

Special tokens follow Qwen3: `<|endoftext|>` (bos, and a second eos in generation_config.json),
`<|im_start|>`, `<|im_end|>` (eos). A preset whose vocabulary holds Qwen's ids keeps them;
otherwise they take ids 256-258, right after the 256 byte tokens.
"""

from __future__ import annotations

from typing import Any

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
QWEN_SPECIAL_IDS = (151643, 151644, 151645)
SMALL_SPECIAL_IDS = (256, 257, 258)
MIN_VOCAB = 259  # 256 byte tokens + 3 special tokens

_QWEN3_COMMON: dict[str, Any] = {
    "vocab_size": 151936,
    "head_dim": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0,
    "max_position_embeddings": 40960,
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
    "tiny": {
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
