"""Tokens, money and wall time per model and per run, and the budget that stops a run.

Thread-safe: every method takes one lock. The client calls `reserve` before it sends a request
and `settle` when the request is over (answered or failed). A request's worst case is its prompt
at 3 characters per token plus the full `max_tokens` answer. `reserve` raises `BudgetExceeded`
when what is spent plus that worst case would pass a limit; when only the worst cases of the
requests in flight stand in the way, it waits for one of them to settle and looks again. So a
run never crosses its budget (unless an answer's true usage beats the estimate), and requests
in flight do not stop it early.

Tokens come from the answer's `usage` field; an answer without one is counted at 3 characters
per token (errs high) and marked `estimated`. Cost is tokens times the model's price per 1M.

`to_dict`/`from_dict` let the controller checkpoint and restore the tally, so a resumed run
keeps its spent budget.
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, fields
from typing import Any

from evokernel.evolve.llm.config import LLMBudget, ModelSpec
from evokernel.evolve.types import BudgetExceeded, Usage

CHARS_PER_TOKEN = 3.0


def estimate_tokens(text_chars: int) -> int:
    return math.ceil(text_chars / CHARS_PER_TOKEN)


@dataclass
class Tally:
    requests: int = 0  # requests finished (each may have taken several attempts)
    attempts: int = 0
    failures: int = 0  # requests that ended without a usable answer
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    estimated: int = 0  # answers without a usage field

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Tally) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(frozen=True)
class Reservation:
    model: str
    tokens: int
    cost_usd: float


class Accounting:
    def __init__(self, budget: LLMBudget | None = None) -> None:
        self.budget = budget or LLMBudget()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._models: dict[str, Tally] = {}
        self._reserved_tokens = 0
        self._reserved_usd = 0.0

    def reserve(self, model: ModelSpec, prompt_chars: int, max_tokens: int) -> Reservation:
        prompt_est = estimate_tokens(prompt_chars)
        res = Reservation(model.name, prompt_est + max_tokens, model.cost(prompt_est, max_tokens))
        limit_t, limit_usd = self.budget.tokens, self.budget.cost_usd
        with self._lock:
            while True:
                total = self._total_locked()
                if limit_t and total.tokens + res.tokens > limit_t:
                    raise BudgetExceeded(
                        f"token budget: {total.tokens} of {limit_t} tokens spent; the next "
                        f"request may need {res.tokens} (its prompt and max_tokens)"
                    )
                if limit_usd and total.cost_usd + res.cost_usd > limit_usd:
                    raise BudgetExceeded(
                        f"money budget: ${total.cost_usd:.4f} of ${limit_usd:.4f} spent; the "
                        f"next request may cost ${res.cost_usd:.4f}"
                    )
                fits_t = not limit_t or total.tokens + self._reserved_tokens + res.tokens <= limit_t
                fits_usd = not limit_usd or (
                    total.cost_usd + self._reserved_usd + res.cost_usd <= limit_usd
                )
                if fits_t and fits_usd:
                    break
                self._settled.wait()  # requests in flight hold the room; wait for one to end
            self._reserved_tokens += res.tokens
            self._reserved_usd += res.cost_usd
        return res

    def settle(
        self,
        res: Reservation,
        usage: Usage | None,
        *,
        attempts: int,
        wall_s: float,
        failed: bool,
        estimated: bool = False,
    ) -> None:
        with self._lock:
            self._reserved_tokens -= res.tokens
            self._reserved_usd -= res.cost_usd
            t = self._models.setdefault(res.model, Tally())
            t.requests += 1
            t.attempts += attempts
            t.failures += int(failed)
            t.wall_s += wall_s
            t.estimated += int(estimated)
            if usage is not None:
                t.prompt_tokens += usage.prompt_tokens
                t.completion_tokens += usage.completion_tokens
                t.cost_usd += usage.cost_usd
            self._settled.notify_all()

    def _total_locked(self) -> Tally:
        total = Tally()
        for t in self._models.values():
            total.add(t)
        return total

    def total(self) -> Tally:
        with self._lock:
            return self._total_locked()

    def per_model(self) -> dict[str, Tally]:
        with self._lock:
            return {k: Tally(**asdict(v)) for k, v in sorted(self._models.items())}

    def exhausted(self) -> str:
        """A one-line reason when a limit is already reached, else ""."""
        total = self.total()
        limit_t, limit_usd = self.budget.tokens, self.budget.cost_usd
        if limit_t and total.tokens >= limit_t:
            return f"token budget spent: {total.tokens} of {limit_t}"
        if limit_usd and total.cost_usd >= limit_usd:
            return f"money budget spent: ${total.cost_usd:.4f} of ${limit_usd:.4f}"
        return ""

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "models": {k: asdict(v) for k, v in sorted(self._models.items())},
                "total": asdict(self._total_locked()),
                "budget": asdict(self.budget),
            }

    @classmethod
    def from_dict(cls, data: dict[str, Any], budget: LLMBudget | None = None) -> Accounting:
        """Restore a checkpointed tally; `budget` (the run's current config) wins over the
        stored one."""
        acc = cls(budget or LLMBudget(**data.get("budget", {})))
        acc._models = {k: Tally(**v) for k, v in data.get("models", {}).items()}
        return acc
