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

`LLMConfig.from_dict` builds the section from parsed YAML and raises `ConfigError` naming the
key for an unknown key or a bad value.
"""

from __future__ import annotations

import dataclasses
import os
import random
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

from evokernel.errors import ConfigError

T = TypeVar("T")


def build_dataclass(cls: type[T], data: Any, where: str) -> T:
    """`cls(**data)` with nested dataclass fields built recursively; unknown keys and bad
    values raise `ConfigError` naming `where.key`."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        known = ", ".join(fields)
        raise ConfigError(f"unknown config key '{where}.{unknown[0]}' (known: {known})")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, f"{where}.{name}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: {err}") from None


def _coerce(hint: Any, value: Any, where: str) -> Any:
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return build_dataclass(hint, value, where)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if (
        origin in (list, tuple)
        and args
        and isinstance(args[0], type)
        and dataclasses.is_dataclass(args[0])
    ):
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list")
        items = [build_dataclass(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    return value


def _check(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


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
        _check(isinstance(self.name, str) and bool(self.name), "a model needs a non-empty name")
        _check(_number(self.weight) and self.weight >= 0, f"model {self.name}: weight must be >= 0")
        for label in ("prompt_usd_per_mtok", "completion_usd_per_mtok"):
            price = getattr(self, label)
            _check(_number(price) and price >= 0, f"model {self.name}: {label} must be >= 0")
        _check(
            self.max_tokens is None or (isinstance(self.max_tokens, int) and self.max_tokens > 0),
            f"model {self.name}: max_tokens must be a positive integer",
        )
        _check(isinstance(self.extra_body, dict), f"model {self.name}: extra_body: a mapping")

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
        _check(isinstance(self.tokens, int) and self.tokens >= 0, "budget.tokens must be >= 0")
        _check(_number(self.cost_usd) and self.cost_usd >= 0, "budget.cost_usd must be >= 0")


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
        _check(
            isinstance(self.api_base, str) and self.api_base.startswith(("http://", "https://")),
            f"api_base must be an http(s) URL, got {self.api_base!r}",
        )
        _check(
            _number(self.temperature) and 0 <= self.temperature <= 2,
            "temperature must be in [0, 2]",
        )
        _check(isinstance(self.max_tokens, int) and self.max_tokens > 0, "max_tokens must be > 0")
        _check(_number(self.timeout_s) and self.timeout_s > 0, "timeout_s must be > 0")
        _check(isinstance(self.retries, int) and self.retries >= 0, "retries must be >= 0")
        _check(_number(self.backoff_base_s) and self.backoff_base_s >= 0, "backoff_base_s >= 0")
        _check(_number(self.backoff_max_s) and self.backoff_max_s >= 0, "backoff_max_s >= 0")
        _check(
            isinstance(self.max_concurrency, int) and self.max_concurrency >= 1,
            "max_concurrency must be >= 1",
        )
        names = [m.name for m in self.models]
        _check(len(set(names)) == len(names), f"models: a name appears twice: {names}")
        _check(
            not self.models or any(m.weight > 0 for m in self.models),
            "models: at least one weight must be > 0",
        )

    @classmethod
    def from_dict(cls, data: Any, where: str = "llm") -> LLMConfig:
        return build_dataclass(cls, data, where)

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
