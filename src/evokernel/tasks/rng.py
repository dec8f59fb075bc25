"""Seeded randomness shared by the task input generators.

Every random draw of a task flows from `derive_seed(seed, *labels)`: a stable 63-bit hash
(BLAKE2b, not Python's salted `hash`) of the caller's seed and labels such as the scenario
name. Tensors come from a `torch.Generator` on the device the inputs are built on, in float32,
and are cast afterwards. On the CPU a parent and a worker process (or two machines with the same
torch) build bit-identical inputs; on a GPU, two processes on the same GPU model with the same
torch do (the evaluator's parent and its worker share one GPU), at a small fraction of the CPU's
cost for large inputs.
"""

from __future__ import annotations

import hashlib
import random

import torch


def derive_seed(seed: int, *labels: object) -> int:
    """A 63-bit seed that depends on `seed` and every label (stable across processes)."""
    text = repr((int(seed), *(str(label) for label in labels))).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


def generator(seed: int, *labels: object, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator on `device` seeded from `derive_seed(seed, *labels)`."""
    g = torch.Generator(device=device)
    g.manual_seed(derive_seed(seed, *labels))
    return g


def py_rng(seed: int, *labels: object) -> random.Random:
    """A Python RNG for shape draws (hidden scenarios), seeded the same way."""
    return random.Random(derive_seed(seed, *labels))


def randn(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=g, dtype=torch.float32, device=g.device)


def uniform(shape: tuple[int, ...], g: torch.Generator, low: float, high: float) -> torch.Tensor:
    return torch.rand(shape, generator=g, dtype=torch.float32, device=g.device) * (high - low) + low


def signs(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Random +-1.0 in float32."""
    bits = torch.randint(0, 2, shape, generator=g, dtype=torch.int8, device=g.device)
    return bits.float() * 2 - 1
