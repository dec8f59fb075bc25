"""Seeded randomness shared by the task input generators.

Every random draw of a task flows from `derive_seed(seed, *labels)`: a stable 63-bit hash
(BLAKE2b, not Python's salted `hash`) of the caller's seed and labels such as the scenario
name. Tensors come from a CPU `torch.Generator` in float32 and are cast afterwards, so a parent
and a worker process (or two machines with the same torch) build bit-identical inputs.
"""

from __future__ import annotations

import hashlib
import random

import torch


def derive_seed(seed: int, *labels: object) -> int:
    """A 63-bit seed that depends on `seed` and every label (stable across processes)."""
    text = repr((int(seed), *(str(label) for label in labels))).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


def generator(seed: int, *labels: object) -> torch.Generator:
    """A CPU torch generator seeded from `derive_seed(seed, *labels)`."""
    g = torch.Generator(device="cpu")
    g.manual_seed(derive_seed(seed, *labels))
    return g


def py_rng(seed: int, *labels: object) -> random.Random:
    """A Python RNG for shape draws (hidden scenarios), seeded the same way."""
    return random.Random(derive_seed(seed, *labels))


def randn(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=g, dtype=torch.float32)


def uniform(shape: tuple[int, ...], g: torch.Generator, low: float, high: float) -> torch.Tensor:
    return torch.rand(shape, generator=g, dtype=torch.float32) * (high - low) + low


def signs(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Random +-1.0 in float32."""
    return torch.randint(0, 2, shape, generator=g, dtype=torch.int8).float() * 2 - 1
