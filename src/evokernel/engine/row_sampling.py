"""Next tokens for a batch whose rows each carry their own sampling parameters.

    tokens = sample_rows(logits [B, V] float32, RowTable rows, noise [B, V] | None)

A row with temperature 0 (or top-k 1) takes the argmax of its logits (ties to the lowest id,
as `torch.argmax`). The others divide by their temperature, keep their top-k and their top-p
nucleus (the smallest set of most likely tokens whose mass reaches top-p; the most likely token
always stays), and draw by the exponential race: argmax(p / E), E ~ Exp(1) drawn per token,
which is a draw from p (ops/sampling.py does the same for one parameter set). The masks run
only when some row asks for them: one descending sort of the rows serves both.

`draw_noise(shape, generators, shared)` fills the exponential draws: a row with its own seed
draws from its own generator, so its tokens depend on its seed and its logits alone, never on
the rows beside it; the other rows share one generator.

`logprobs(logits, tokens, top)` gives each row's log-probability of its token and its `top`
most likely tokens, from the raw logits (before temperature and masks).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RowTable:
    """Per-row sampling parameters on the device, [B] each."""

    temperature: torch.Tensor  # float32; 0 = greedy
    top_k: torch.Tensor  # int64; 0 = no top-k mask
    top_p: torch.Tensor  # float32; 1 = no nucleus mask

    @classmethod
    def allocate(cls, rows: int, device: torch.device) -> RowTable:
        return cls(
            temperature=torch.zeros(rows, dtype=torch.float32, device=device),
            top_k=torch.zeros(rows, dtype=torch.int64, device=device),
            top_p=torch.ones(rows, dtype=torch.float32, device=device),
        )

    def rows(self, start: int, stop: int) -> RowTable:
        return RowTable(
            self.temperature[start:stop], self.top_k[start:stop], self.top_p[start:stop]
        )


def sample_rows(
    logits: torch.Tensor, table: RowTable, noise: torch.Tensor | None, *, masks: bool
) -> torch.Tensor:
    """[B, V] float32 -> [B] int64. `noise` [B, V] (Exp(1) draws) is needed unless every row
    is greedy; `masks` says whether any row has a top-k or top-p mask (the host knows)."""
    greedy = torch.argmax(logits, dim=-1)
    if noise is None:
        return greedy
    temperature = table.temperature.unsqueeze(1)  # [B, 1]
    scaled = logits / torch.where(temperature > 0, temperature, 1.0)
    if masks:
        scaled = _mask(scaled, table.top_k, table.top_p)
    probs = torch.softmax(scaled, dim=-1)
    drawn = torch.argmax(probs / noise, dim=-1)
    sampled = (table.temperature > 0) & (table.top_k != 1)
    return torch.where(sampled, drawn, greedy)


def _mask(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Everything outside each row's top-k and top-p nucleus set to -inf."""
    V = scaled.shape[-1]
    ordered, order = torch.sort(scaled, dim=-1, descending=True)  # [B, V]
    rank = torch.arange(V, device=scaled.device).unsqueeze(0)
    k = torch.where(top_k > 0, top_k, V).unsqueeze(1)
    probs = torch.softmax(ordered, dim=-1)
    mass_above = torch.cumsum(probs, dim=-1) - probs
    # p = 1 keeps everything, even where rounding lets the cumulative mass reach 1 early.
    p = torch.where(top_p < 1, top_p, 2.0).unsqueeze(1)
    drop = (rank >= k) | (mass_above >= p)
    ordered = ordered.masked_fill(drop, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(-1, order, ordered)


def draw_noise(
    shape: tuple[int, int],
    generators: dict[int, torch.Generator],
    shared: torch.Generator,
    device: torch.device,
) -> torch.Tensor:
    """Exp(1) draws [B, V]: row r from `generators[r]` when present, else from `shared`."""
    noise = torch.empty(shape, dtype=torch.float32, device=device).exponential_(
        1.0, generator=shared
    )
    for row, gen in generators.items():
        noise[row].exponential_(1.0, generator=gen)
    return noise


def logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, top: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits [B, V] float32, tokens [B] -> (the tokens' log-probabilities [B], the `top` most
    likely ids [B, top] and their log-probabilities [B, top])."""
    lp = torch.log_softmax(logits, dim=-1)
    chosen = lp.gather(1, tokens.unsqueeze(1)).squeeze(1)
    values, ids = lp.topk(top, dim=-1) if top > 0 else (lp[:, :0], tokens[:, None][:, :0])
    return chosen, ids, values
