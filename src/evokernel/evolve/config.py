"""The search's configuration: nested dataclasses, one per concern, validated on construction.

`load_config(path)` reads a YAML file over the defaults: a key the dataclasses do not know is
an error naming it (`islands.cuont`), as is a key given twice, a value of the wrong type or out
of range (`sections.py` builds and checks every section the same way). Every key is documented,
with its default, in `default_config.yaml` next to this module; a test keeps that file and
these defaults identical.

This module imports no mutator, LLM client or evaluator code: the sections of the mutators and
of the LLM live beside them (`mutators/config.py`, `llm/config.py`) and import nothing heavy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evokernel.errors import ConfigError
from evokernel.evolve.llm.config import LLMConfig
from evokernel.evolve.mutators.config import OfflineConfig, PromptConfig
from evokernel.evolve.sections import INT_LIMIT, build_section, require

DEFAULT_CONFIG = Path(__file__).with_name("default_config.yaml")
MUTATOR_NAMES = ("offline", "llm_diff", "llm_rewrite", "crossover")
FEATURE_KINDS = ("regime", "knob")
BACKENDS = ("local", "ray")
MAX_ITERATIONS = 1_000_000  # 20 evaluations a minute: a month; more is a typo
MAX_PARALLEL = 4096  # workers, iterations in flight: one thread or task each
MAX_SECONDS = 86_400.0 * 365  # a year


def check_weights(weights: dict[str, float]) -> None:
    """`mutators.weights`: known names, non-negative, at least one positive."""
    for name, weight in weights.items():
        require(
            name in MUTATOR_NAMES,
            f"weights: unknown mutator {name!r} (known: {', '.join(MUTATOR_NAMES)})",
        )
        require(weight >= 0, f"weights.{name} must be >= 0")
    require(sum(weights.values()) > 0, "weights: at least one must be > 0")


def _within(value: float, low: float, high: float, key: str) -> None:
    show = lambda x: f"{x:g}" if isinstance(x, float) else str(x)
    require(low <= value <= high, f"{key} must be in [{show(low)}, {show(high)}], got {value!r}")


@dataclass
class IslandsConfig:
    count: int = 4
    migration_interval: int = 4  # generations (rounds over all islands) between migrations
    migration_count: int = 2  # elites each island sends to the next one on the ring

    def __post_init__(self) -> None:
        _within(self.count, 1, 1024, "count")
        _within(self.migration_interval, 1, MAX_ITERATIONS, "migration_interval")
        _within(self.migration_count, 0, 1024, "migration_count")


@dataclass
class GridConfig:
    features: list[str] | str = "auto"  # "auto" or ["regime:<name>" | "knob:<NAME>", ...]
    bins: list[float] = field(default_factory=lambda: [0.9, 1.0, 1.05, 1.15, 1.3, 1.6])
    regime_stat: str = "geomean"  # how a regime's scenarios combine: geomean | max

    def __post_init__(self) -> None:
        if isinstance(self.features, str):
            require(self.features == "auto", "features must be 'auto' or a list")
        else:
            for spec in self.features:
                kind, _, name = spec.partition(":")
                require(
                    kind in FEATURE_KINDS and bool(name),
                    f"features: {spec!r} is not 'regime:<name>' or 'knob:<NAME>'",
                )
            require(len(set(self.features)) == len(self.features), "features repeats")
            require(len(self.features) <= 8, "features: at most 8")
        require(0 < len(self.bins) <= 64, "bins must hold 1 to 64 edges")
        require(
            all(a < b for a, b in zip(self.bins, self.bins[1:])),
            "bins must be strictly increasing",
        )
        require(self.regime_stat in ("geomean", "max"), "regime_stat: geomean or max")


@dataclass
class SelectionConfig:
    exploit: float = 0.7  # parent among the island's best programs
    explore: float = 0.2  # parent = elite of a random occupied cell of the island's grid
    random: float = 0.1  # parent = any correct program of the island
    elite_pool: int = 3
    inspirations: int = 3

    def __post_init__(self) -> None:
        ratios = (self.exploit, self.explore, self.random)
        require(all(r >= 0 for r in ratios), "exploit, explore, random must be >= 0")
        require(
            abs(sum(ratios) - 1.0) < 1e-6,
            f"exploit + explore + random must be 1, got {sum(ratios):g}",
        )
        _within(self.elite_pool, 1, 10_000, "elite_pool")
        _within(self.inspirations, 0, 100, "inspirations")


@dataclass
class MutatorsConfig:
    weights: dict[str, float] = field(default_factory=lambda: {"offline": 1.0})
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)

    def __post_init__(self) -> None:
        check_weights(self.weights)


@dataclass
class EvaluatorConfig:
    workers: int = 0  # 0: local: evaluate.default_workers on cuda, 1 on cpu; ray: the cluster's
    timeout_s: float = 180.0
    reps: int = 0  # 0: the evaluator's default
    profile: bool = True
    memory_mb: int = 8192
    cascade: str = "auto"  # auto: screen first when timing is real (cuda) | off
    screen_scenarios: list[str] = field(default_factory=list)  # []: the evaluator's choice

    def __post_init__(self) -> None:
        _within(self.workers, 0, MAX_PARALLEL, "workers")
        _within(self.timeout_s, 1e-3, 86_400.0, "timeout_s")
        _within(self.reps, 0, 100_000, "reps")
        _within(self.memory_mb, 256, 2**24, "memory_mb")
        require(self.cascade in ("auto", "off"), f"cascade: auto or off, got {self.cascade!r}")
        require(
            len(set(self.screen_scenarios)) == len(self.screen_scenarios),
            "screen_scenarios repeats a scenario",
        )


@dataclass
class BackendConfig:
    kind: str = "local"  # local | ray
    address: str | None = None  # ray: "auto", "HOST:PORT", "ray://HOST:PORT"; None: see below
    max_retries: int = 2  # re-queues of one evaluation after its worker or node died

    def __post_init__(self) -> None:
        require(self.kind in BACKENDS, f"kind: {self.kind!r} is not one of {', '.join(BACKENDS)}")
        require(self.address is None or bool(self.address.strip()), "address must not be empty")
        _within(self.max_retries, 0, 100, "max_retries")


@dataclass
class BudgetConfig:
    iterations: int = 10
    wall_time_s: float = 0.0  # 0: no limit
    tokens: int = 0  # 0: no limit
    cost_usd: float = 0.0  # 0: no limit

    def __post_init__(self) -> None:
        _within(self.iterations, 0, MAX_ITERATIONS, "iterations")
        _within(self.wall_time_s, 0, MAX_SECONDS, "wall_time_s")
        _within(self.tokens, 0, INT_LIMIT - 1, "tokens")
        _within(self.cost_usd, 0, 1e12, "cost_usd")


@dataclass
class CheckpointConfig:
    synchronous: str = "normal"  # SQLite synchronous pragma: normal | full
    write_sources: bool = True  # also write each program to RUN_DIR/programs/<id>.py

    def __post_init__(self) -> None:
        require(self.synchronous in ("normal", "full"), "synchronous: normal or full")


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
    backend: BackendConfig = field(default_factory=BackendConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def __post_init__(self) -> None:
        _within(self.seed, 0, INT_LIMIT - 1, "seed")
        _within(self.in_flight, 0, MAX_PARALLEL, "in_flight")
        require(
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


def config_from_dict(data: dict[str, Any] | None) -> SearchConfig:
    return build_section(SearchConfig, data)


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML says keys are
    unique; PyYAML would keep the last one silently)."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
        line = key_node.start_mark.line + 1
        if key in seen:
            raise ConfigError(f"key {key!r} given twice (lines {seen[key]} and {line})")
        seen[key] = line
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def parse_yaml(text: str) -> Any:
    """Parsed YAML with unique keys; raises ConfigError or yaml.YAMLError."""
    return yaml.load(text, Loader=_StrictLoader)


def load_config(path: str | Path | None) -> SearchConfig:
    """The defaults, overridden by the YAML file at `path` (None: defaults only)."""
    if path is None:
        return SearchConfig()
    path = Path(path)
    try:
        data = parse_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (not UTF-8)") from None
    except OSError as err:
        raise ConfigError(f"cannot read config {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    try:
        return config_from_dict(data)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
