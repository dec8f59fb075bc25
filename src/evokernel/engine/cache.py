"""Static, preallocated KV cache.

Per layer one K and one V tensor, each `[B, Hkv, S_max, D]` in the model dtype: exactly the
layout of the `gqa_decode_attention` task, so an evolved attention kernel reads it unchanged.
The tensors never move or grow, which is what lets a CUDA graph capture the decode step.

Contract: position `p` of sequence `b` lives at `k[layer][b, :, p, :]`. A position is written
(by `qk_norm_rope_append`) before any attention reads it; positions `>= seq_lens[b]` hold
junk that attention must ignore. Bytes: 2 * L * B * Hkv * S_max * D * itemsize
(Qwen3-0.6B bf16: 114,688 B per token of context per sequence).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evokernel.model.config import ModelConfig


@dataclass
class KVCache:
    k: list[torch.Tensor]  # per layer [B, Hkv, S_max, D]
    v: list[torch.Tensor]  # per layer [B, Hkv, S_max, D]

    @classmethod
    def allocate(
        cls,
        cfg: ModelConfig,
        batch: int,
        max_seq_len: int,
        device: str | torch.device,
        dtype: torch.dtype,
    ) -> KVCache:
        """Zero-filled cache (zeros, not junk, so a stray read yields finite values)."""
        assert batch >= 1 and max_seq_len >= 1, (batch, max_seq_len)
        shape = (batch, cfg.num_key_value_heads, max_seq_len, cfg.head_dim)
        layers = range(cfg.num_hidden_layers)
        return cls(
            k=[torch.zeros(shape, device=device, dtype=dtype) for _ in layers],
            v=[torch.zeros(shape, device=device, dtype=dtype) for _ in layers],
        )

    @property
    def batch(self) -> int:
        return self.k[0].shape[0]

    @property
    def max_seq_len(self) -> int:
        return self.k[0].shape[2]

    @property
    def dtype(self) -> torch.dtype:
        return self.k[0].dtype

    @property
    def device(self) -> torch.device:
        return self.k[0].device

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v))

    def zero_(self) -> None:
        for t in (*self.k, *self.v):
            t.zero_()
