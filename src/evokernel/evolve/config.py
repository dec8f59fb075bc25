"""The search's configuration: nested dataclasses, one per concern, validated on construction.

`load_config(path)` reads a YAML file over the defaults: a key the dataclasses do not know is
an error naming it (`islands.cuont`), as is a value of the wrong type or out of range. Every
key is documented, with its default, in `default_config.yaml` next to this module; a test
keeps that file and these defaults identical.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evokernel.errors import ConfigError
from evokernel.evolve.llm.config import LLMConfig
from evokernel.evolve.mutators.config import OfflineConfig, PromptConfig
from evokernel.evolve.mutators.registry import NAMES

DEFAULT_CONFIG = Path(__file__).with_name("default_config.yaml")
MUTATOR_NAMES = NAMES
FEATURE_KINDS = ("regime", "knob")


def _require(ok: bool, msg: str) -> None:
    if not ok:
        raise ConfigError(msg)


@dataclass
class IslandsConfig:
    count: int = 4
    migration_interval: int = 4  # generations (rounds over all islands) between migrations
    migration_count: int = 2  # elites each island sends to the next one on the ring

    def __post_init__(self) -> None:
        _require(self.count >= 1, "islands.count must be >= 1")
        _require(self.migration_interval >= 1, "islands.migration_interval must be >= 1")
        _require(self.migration_count >= 0, "islands.migration_count must be >= 0")


@dataclass
class GridConfig:
    features: list[str] | str = "auto"  # "auto" or ["regime:<name>" | "knob:<NAME>", ...]
    bins: list[float] = field(default_factory=lambda: [0.9, 1.0, 1.05, 1.15, 1.3, 1.6])
    regime_stat: str = "geomean"  # how a regime's scenarios combine: geomean | max

    def __post_init__(self) -> None:
        if isinstance(self.features, str):
            _require(self.features == "auto", "grid.features must be 'auto' or a list")
        else:
            for spec in self.features:
                kind, _, name = spec.partition(":")
                _require(
                    kind in FEATURE_KINDS and bool(name),
                    f"grid.features: {spec!r} is not 'regime:<name>' or 'knob:<NAME>'",
                )
            _require(len(set(self.features)) == len(self.features), "grid.features repeats")
        _require(bool(self.bins), "grid.bins must not be empty")
        _require(
            all(a < b for a, b in zip(self.bins, self.bins[1:])),
            "grid.bins must be strictly increasing",
        )
        _require(self.regime_stat in ("geomean", "max"), "grid.regime_stat: geomean or max")


@dataclass
class SelectionConfig:
    exploit: float = 0.7  # parent among the island's best programs
    explore: float = 0.2  # parent = elite of a random occupied cell of the island's grid
    random: float = 0.1  # parent = any correct program of the island
    elite_pool: int = 3
    inspirations: int = 3

    def __post_init__(self) -> None:
        ratios = (self.exploit, self.explore, self.random)
        _require(all(r >= 0 for r in ratios), "selection ratios must be >= 0")
        _require(
            abs(sum(ratios) - 1.0) < 1e-6,
            f"selection.exploit + explore + random must be 1, got {sum(ratios):g}",
        )
        _require(self.elite_pool >= 1, "selection.elite_pool must be >= 1")
        _require(self.inspirations >= 0, "selection.inspirations must be >= 0")


@dataclass
class MutatorsConfig:
    weights: dict[str, float] = field(default_factory=lambda: {"offline": 1.0})
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)

    def __post_init__(self) -> None:
        for name, weight in self.weights.items():
            _require(
                name in MUTATOR_NAMES,
                f"mutators.weights: unknown mutator {name!r} (known: {', '.join(MUTATOR_NAMES)})",
            )
            _require(weight >= 0, f"mutators.weights.{name} must be >= 0")
        _require(sum(self.weights.values()) > 0, "mutators.weights: at least one must be > 0")


@dataclass
class EvaluatorConfig:
    workers: int = 0  # 0: one per visible GPU on cuda, 1 on cpu
    timeout_s: float = 180.0
    reps: int = 0  # 0: the evaluator's default
    profile: bool = True
    memory_mb: int = 8192

    def __post_init__(self) -> None:
        _require(self.workers >= 0, "evaluator.workers must be >= 0")
        _require(self.timeout_s > 0, "evaluator.timeout_s must be > 0")
        _require(self.reps >= 0, "evaluator.reps must be >= 0")
        _require(self.memory_mb >= 256, "evaluator.memory_mb must be >= 256")


@dataclass
class BudgetConfig:
    iterations: int = 10
    wall_time_s: float = 0.0  # 0: no limit
    tokens: int = 0  # 0: no limit
    cost_usd: float = 0.0  # 0: no limit

    def __post_init__(self) -> None:
        _require(self.iterations >= 0, "budget.iterations must be >= 0")
        _require(
            self.wall_time_s >= 0 and self.tokens >= 0 and self.cost_usd >= 0,
            "budget limits must be >= 0",
        )


@dataclass
class CheckpointConfig:
    synchronous: str = "normal"  # SQLite synchronous pragma: normal | full
    write_sources: bool = True  # also write each program to RUN_DIR/programs/<id>.py

    def __post_init__(self) -> None:
        _require(self.synchronous in ("normal", "full"), "checkpoint.synchronous: normal|full")


@dataclass
class SearchConfig:
    seed: int = 0
    in_flight: int = 0  # iterations proposed or evaluated at once; 0: evaluator workers
    islands: IslandsConfig = field(default_factory=IslandsConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    mutators: MutatorsConfig = field(default_factory=MutatorsConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def __post_init__(self) -> None:
        _require(self.in_flight >= 0, "in_flight must be >= 0")
        _require(
            not self.uses_llm or self.llm.enabled,
            "mutators.weights asks for an LLM mutator but llm.models has no model with weight > 0",
        )

    @property
    def uses_llm(self) -> bool:
        return any(self.mutators.weights.get(n, 0) > 0 for n in ("llm_diff", "llm_rewrite"))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def _convert(tp: Any, value: Any, key: str) -> Any:
    """`value` as type `tp` (a dataclass, list, dict, union or scalar), or ConfigError."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp) and hasattr(tp, "from_dict"):
        return typing.cast(Any, tp).from_dict(value, key)  # sections owned by the mutators
    if dataclasses.is_dataclass(tp):
        return _build(typing.cast(type, tp), value, key)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in typing.get_args(tp):
            try:
                return _convert(option, value, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[-1])
    if origin is list:
        _require(isinstance(value, list), f"{key}: expected a list, got {value!r}")
        (item,) = typing.get_args(tp)
        return [_convert(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        _require(isinstance(value, dict), f"{key}: expected a mapping, got {value!r}")
        _, item = typing.get_args(tp)
        return {str(k): _convert(item, v, f"{key}.{k}") for k, v in value.items()}
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        _require(ok, f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        _require(ok, f"{key}: expected an integer, got {value!r}")
        return value
    _require(isinstance(value, tp), f"{key}: expected {tp.__name__}, got {value!r}")
    return value


def _build(cls: type, data: Any, prefix: str) -> Any:
    where = prefix or "the top level"
    _require(isinstance(data, dict), f"{where}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            full = f"{prefix}.{key}" if prefix else str(key)
            raise ConfigError(f"unknown config key '{full}'")
    kwargs = {k: _convert(hints[k], v, f"{prefix}.{k}" if prefix else k) for k, v in data.items()}
    return cls(**kwargs)


def config_from_dict(data: dict[str, Any] | None) -> SearchConfig:
    return typing.cast(SearchConfig, _build(SearchConfig, data or {}, ""))


def load_config(path: str | Path | None) -> SearchConfig:
    """The defaults, overridden by the YAML file at `path` (None: defaults only)."""
    if path is None:
        return SearchConfig()
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise ConfigError(f"cannot read config {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    try:
        return config_from_dict(data)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
