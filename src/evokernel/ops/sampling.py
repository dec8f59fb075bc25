"""Token selection from logits: greedy, or temperature with top-k and top-p, seeded.

`sample(logits [B, V] float32, params, generator) -> [B] int64`. Greedy (temperature 0) is an
argmax, with ties going to the lowest id. Otherwise logits are divided by the temperature,
masked to the top-k, then to the smallest top-p nucleus, and a token is drawn with the
exponential-race trick (argmax of p / Exp(1)), which equals sampling from p and needs no host
sync. The draw uses `generator` only, so the same seed gives the same tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from evokernel.errors import ConfigError

# Below this a temperature only risks overflowing logits / T to inf (and NaN probabilities);
# its draws are the argmax anyway, which temperature 0 gives exactly.
MIN_TEMPERATURE = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = no top-k mask
    top_p: float = 1.0  # 1 = no nucleus mask

    def __post_init__(self) -> None:
        t = self.temperature
        if not (math.isfinite(t) and (t == 0 or t >= MIN_TEMPERATURE)):
            raise ConfigError(
                f"--temperature must be 0 (greedy) or a finite value >= {MIN_TEMPERATURE:g}, "
                f"got {t}"
            )
        if self.top_k < 0:
            raise ConfigError(f"--top-k must be >= 0, got {self.top_k}")
        if not (0 < self.top_p <= 1):
            raise ConfigError(f"--top-p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1


GREEDY = SamplingParams()


def mask_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """`logits` [B, V] with everything outside the top-k and the top-p nucleus set to -inf.

    The nucleus is the smallest set of highest-probability tokens whose mass reaches top_p:
    a token stays when the mass of the tokens ranked above it is below top_p (so the most
    likely token always stays).
    """
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # [B, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        mass_above = torch.cumsum(probs, dim=-1) - probs
        ordered = ordered.masked_fill(mass_above >= top_p, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, ordered)
    return logits


def sample(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> torch.Tensor:
    """Next token per row of `logits` [B, V] (float32) -> [B] int64."""
    if params.greedy:
        return torch.argmax(logits, dim=-1)
    masked = mask_logits(logits / params.temperature, params.top_k, params.top_p)
    probs = torch.softmax(masked, dim=-1)
    race = torch.empty_like(probs).exponential_(1.0, generator=generator)
    return torch.argmax(probs / race, dim=-1)
