"""Configuration of the LLM ensemble: the `llm:` section of the search's YAML, and the budget.

Every key, with its default (an empty `models` list means "no LLM": the search runs with the
offline mutators only)::

    llm:
      api_base: "http://localhost:8000/v1"  # OpenAI-compatible; POST {api_base}/chat/completions
      api_key_env: "OPENAI_API_KEY"  # environment variable holding the key; unset: no auth header
      models:                        # the ensemble; each request draws one model by weight
        - name: "qwen3-32b"          # the `model` field sent to the endpoint
          weight: 1.0                # relative; 0 disables the model
          prompt_usd_per_mtok: 0.0   # USD per 1M prompt tokens (cost accounting and budget)
          completion_usd_per_mtok: 0.0
          temperature: null          # null: llm.temperature
          max_tokens: null           # null: llm.max_tokens
          api_base: null             # null: llm.api_base
          api_key_env: null          # null: llm.api_key_env
          extra_body: {}             # merged into the request, e.g. {reasoning_effort: "low"}
      temperature: 0.7               # 0 to 2
      top_p: null                    # null: not sent
      max_tokens: 8192               # completion tokens per answer
      timeout_s: 180                 # one attempt, connect to last byte
      retries: 2                     # further attempts on 429, 5xx, timeouts, connection errors
      backoff_base_s: 1.0            # wait before retry n: min(max, base * 2**n * U(0.5, 1.5));
      backoff_max_s: 60              #   a Retry-After header (capped at backoff_max_s) wins
      max_concurrency: 4             # requests in flight at once, across all threads

The run's spending limits are `LLMBudget(tokens, cost_usd)`, 0 meaning no limit: the same
names as the search's top-level `budget:` section, from which the controller builds it.

`LLMConfig.from_dict` builds the section from parsed YAML (`sections.build_section`) and raises
`ConfigError` naming the key for an unknown key or a bad value.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any

from evokernel.evolve.sections import build_section, require

MAX_TOKENS = 10_000_000  # completion tokens per answer: beyond any model's window
MAX_SECONDS = 86_400.0  # one day: a longer wait is a typo
MAX_CONCURRENCY = 1024  # one thread each


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    weight: float = 1.0
    prompt_usd_per_mtok: float = 0.0
    completion_usd_per_mtok: float = 0.0
    temperature: float | None = None
    max_tokens: int | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require(isinstance(self.name, str) and bool(self.name), "name must not be empty")
        require(_number(self.weight) and self.weight >= 0, "weight must be >= 0")
        for label in ("prompt_usd_per_mtok", "completion_usd_per_mtok"):
            price = getattr(self, label)
            require(_number(price) and price >= 0, f"{label} must be >= 0")
        require(
            self.temperature is None or (_number(self.temperature) and 0 <= self.temperature <= 2),
            "temperature must be in [0, 2]",
        )
        require(
            self.max_tokens is None or (isinstance(self.max_tokens, int) and self.max_tokens > 0),
            "max_tokens must be a positive integer",
        )
        require(
            self.api_base is None or self.api_base.startswith(("http://", "https://")),
            f"api_base must be an http(s) URL, got {self.api_base!r}",
        )
        require(isinstance(self.extra_body, dict), "extra_body must be a mapping")

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.prompt_usd_per_mtok
            + completion_tokens * self.completion_usd_per_mtok
        ) / 1e6


@dataclass(frozen=True)
class LLMBudget:
    """Spending limits of a run; 0 means no limit."""

    tokens: int = 0  # prompt + completion tokens
    cost_usd: float = 0.0

    def __post_init__(self) -> None:
        require(isinstance(self.tokens, int) and self.tokens >= 0, "tokens must be >= 0")
        require(_number(self.cost_usd) and self.cost_usd >= 0, "cost_usd must be >= 0")


@dataclass(frozen=True)
class LLMConfig:
    api_base: str = "http://localhost:8000/v1"
    api_key_env: str = "OPENAI_API_KEY"
    models: list[ModelSpec] = field(default_factory=list)
    temperature: float = 0.7
    top_p: float | None = None
    max_tokens: int = 8192
    timeout_s: float = 180.0
    retries: int = 2
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    max_concurrency: int = 4

    def __post_init__(self) -> None:
        require(
            isinstance(self.api_base, str) and self.api_base.startswith(("http://", "https://")),
            f"api_base must be an http(s) URL, got {self.api_base!r}",
        )
        require(
            _number(self.temperature) and 0 <= self.temperature <= 2,
            "temperature must be in [0, 2]",
        )
        require(
            self.top_p is None or (_number(self.top_p) and 0 < self.top_p <= 1),
            "top_p must be in (0, 1]",
        )
        require(
            isinstance(self.max_tokens, int) and 0 < self.max_tokens <= MAX_TOKENS,
            f"max_tokens must be in [1, {MAX_TOKENS}]",
        )
        require(
            _number(self.timeout_s) and 0 < self.timeout_s <= MAX_SECONDS,
            f"timeout_s must be in (0, {MAX_SECONDS}]",
        )
        require(
            isinstance(self.retries, int) and 0 <= self.retries <= 100,
            "retries must be in [0, 100]",
        )
        for name in ("backoff_base_s", "backoff_max_s"):
            value = getattr(self, name)
            require(_number(value) and 0 <= value <= MAX_SECONDS, f"{name} must be in [0, 86400]")
        require(
            isinstance(self.max_concurrency, int) and 1 <= self.max_concurrency <= MAX_CONCURRENCY,
            f"max_concurrency must be in [1, {MAX_CONCURRENCY}]",
        )
        names = [m.name for m in self.models]
        require(len(set(names)) == len(names), f"models: a name appears twice: {names}")
        require(
            not self.models or any(m.weight > 0 for m in self.models),
            "models: at least one weight must be > 0",
        )

    @classmethod
    def from_dict(cls, data: Any, where: str = "llm") -> LLMConfig:
        return build_section(cls, data, where)

    @property
    def enabled(self) -> bool:
        return any(m.weight > 0 for m in self.models)

    def endpoint(self, model: ModelSpec) -> str:
        return (model.api_base or self.api_base).rstrip("/") + "/chat/completions"

    def api_key(self, model: ModelSpec) -> str:
        return os.environ.get(model.api_key_env or self.api_key_env, "")


def pick_model(models: list[ModelSpec], rng: random.Random) -> ModelSpec:
    """One model drawn by weight with a single `rng.random()` call (deterministic per seed)."""
    live = [m for m in models if m.weight > 0]
    if not live:
        raise ValueError("no model with a weight > 0")
    x = rng.random() * sum(m.weight for m in live)
    for m in live:
        x -= m.weight
        if x < 0:
            return m
    return live[-1]
