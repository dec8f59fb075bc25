"""The bandwidth floor of batch-1 decode: the bytes one step must read, over the copy bandwidth.

A decode step at context position p reads every weight once and the KV cache of p tokens:

    weight_bytes       = layers (q/k/v/o, gate/up/down, norms) + final norm + lm_head
    kv_bytes_per_token = 2 (K and V) x layers x kv heads x head_dim x itemsize
    floor_ms(p)        = (weight_bytes + kv_bytes_per_token x p) / copy bandwidth

The input embedding is not counted: a step reads one row of it (with tied embeddings that
table is the lm_head, counted once). Qwen3-0.6B in bf16: 1,192,099,840 + 114,688 B/token.

The copy bandwidth is read + write bytes of a large device-to-device copy, measured in the same
process as the figures it divides (on the CPU: a large host copy, for the smoke test's arithmetic
only; no figure taken there is a speed claim).
"""

from __future__ import annotations

import time

import torch

from evokernel.model.config import ModelConfig


def weight_bytes(cfg: ModelConfig, itemsize: int) -> int:
    """Bytes of weights one decode step reads (all of them once, the embedding table aside)."""
    H, inter, D = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    per_layer = (
        (cfg.q_size + 2 * cfg.kv_size) * H  # q, k, v
        + H * cfg.q_size  # o
        + 2 * inter * H  # gate, up
        + H * inter  # down
        + 2 * H  # input and post-attention norms
        + 2 * D  # q and k norms
    )
    head = cfg.vocab_size * H + H  # lm_head (the embedding when tied) + final norm
    return (cfg.num_hidden_layers * per_layer + head) * itemsize


def kv_bytes_per_token(cfg: ModelConfig, itemsize: int) -> int:
    return 2 * cfg.num_hidden_layers * cfg.kv_size * itemsize


def floor_ms(weights: int, kv_per_token: int, position: int, copy_gbps: float) -> float:
    """Milliseconds to read one step's bytes at `copy_gbps` (GB/s, 1e9 bytes)."""
    return (weights + kv_per_token * position) / (copy_gbps * 1e9) * 1e3


def copy_bandwidth_gbps(device: str) -> float:
    """Read + write GB/s of a large copy on `device` (1 GiB on CUDA, 256 MiB on the CPU)."""
    if device == "cuda":
        from evokernel.evaluate.worker.timing import copy_bandwidth_gbps as cuda_copy_gbps

        return cuda_copy_gbps()
    nbytes = 256 << 20
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.empty_like(src)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    return 2 * nbytes / sorted(times)[len(times) // 2] / 1e9
