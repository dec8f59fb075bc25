"""The search's configuration: nested dataclasses, one per concern, validated on construction.

`load_config(path)` reads a YAML file over the defaults: a key the dataclasses do not know is
an error naming it (`islands.cuont`; all such keys in one line), as is a key given twice, a
value of the wrong type or out of range (`sections.py` builds and checks every section the same
way). Every key is documented, with its default, in `default_config.yaml` next to this module;
a test keeps that file and these defaults identical.

The file may also be an OpenEvolve `config.yaml` (or mix its keys with ours):
`openevolve_config.translate` maps each of its keys to ours, and `read_config` returns the
keys without an equivalent as one warning line (an error under `strict`).

YAML is read defensively: at most `MAX_CONFIG_BYTES`, and aliases are capped (`MAX_ALIASES`,
and `MAX_NODES` nodes once expanded), so a small file of nested aliases (a "billion laughs")
is refused in microseconds instead of expanding for minutes. YAML 1.1 booleans (`on`/`off`)
are accepted where a key takes a mode (`evaluator.cascade`).

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
FEATURE_KINDS = ("regime", "knob", "metric")
MAX_CONFIG_BYTES = 1 << 20  # a configuration is a few kilobytes
MAX_ALIASES = 64
MAX_NODES = 100_000  # YAML nodes once aliases are expanded
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
    # "auto" or ["regime:<name>" | "knob:<NAME>" | "metric:<name>", ...]
    features: list[str] | str = "auto"
    bins: list[float] = field(default_factory=lambda: [0.9, 1.0, 1.05, 1.15, 1.3, 1.6])
    regime_stat: str = "geomean"  # how a regime's scenarios combine: geomean | max
    metric_bins: int | dict[str, int] = 10  # metric features: bins (per feature: a mapping)

    def __post_init__(self) -> None:
        if isinstance(self.features, str):
            require(self.features == "auto", "features must be 'auto' or a list")
        else:
            for spec in self.features:
                kind, _, name = spec.partition(":")
                require(
                    kind in FEATURE_KINDS and bool(name),
                    f"features: {spec!r} is not 'regime:<name>', 'knob:<NAME>' or 'metric:<name>'",
                )
            require(len(set(self.features)) == len(self.features), "features repeats")
            require(len(self.features) <= 8, "features: at most 8")
        require(0 < len(self.bins) <= 64, "bins must hold 1 to 64 edges")
        require(
            all(a < b for a, b in zip(self.bins, self.bins[1:])),
            "bins must be strictly increasing",
        )
        require(self.regime_stat in ("geomean", "max"), "regime_stat: geomean or max")
        counts = (
            self.metric_bins.values() if isinstance(self.metric_bins, dict) else [self.metric_bins]
        )
        require(all(1 <= n <= 1000 for n in counts), "metric_bins must be in [1, 1000]")

    def metric_bins_of(self, name: str) -> int:
        if isinstance(self.metric_bins, dict):
            return self.metric_bins.get(name, 10)
        return self.metric_bins


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
    max_code_chars: int = 0  # a longer child is rejected before evaluation; 0: no limit here

    def __post_init__(self) -> None:
        check_weights(self.weights)
        _within(self.max_code_chars, 0, 1 << 30, "max_code_chars")


@dataclass
class EvaluatorConfig:
    workers: int = 0  # 0: local: evaluate.default_workers on cuda, 1 on cpu; ray: the cluster's
    timeout_s: float = 180.0
    reps: int = 0  # 0: the evaluator's default
    profile: bool = True
    memory_mb: int = 8192
    # auto: kernels screen first when timing is real (cuda); generic evaluators run their
    # evaluate_stage1/2/3 functions as a cascade | off. YAML's on/true mean auto, off/false off.
    cascade: str | bool = "auto"
    screen_scenarios: list[str] = field(default_factory=list)  # []: the evaluator's choice
    # generic evaluators: the score stage i must reach for stage i+1 to run (OpenEvolve's)
    cascade_thresholds: list[float] = field(default_factory=lambda: [0.5, 0.75, 0.9])

    def __post_init__(self) -> None:
        if isinstance(self.cascade, bool) or self.cascade == "on":
            self.cascade = "auto" if self.cascade in (True, "on") else "off"
        require(len(self.cascade_thresholds) <= 8, "cascade_thresholds: at most 8")
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
    patience: int = 0  # stop after this many iterations without a better best; 0: never
    min_improvement: float = 0.0  # what "better" means for patience: best rises by more

    def __post_init__(self) -> None:
        _within(self.patience, 0, MAX_ITERATIONS, "patience")
        _within(self.min_improvement, 0, 1e300, "min_improvement")
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
    unique; PyYAML would keep the last one silently) and capping aliases."""

    def compose_document(self) -> Any:
        node = super().compose_document()  # type: ignore[no-untyped-call]
        _check_expansion(node)
        return node


def _check_expansion(root: Any) -> None:
    """Refuse a document with more than MAX_ALIASES aliases or MAX_NODES expanded nodes."""
    seen: dict[int, int] = {}  # node id -> expanded size (memoized: linear in the graph)
    aliases = 0

    def size(node: Any, depth: int) -> int:
        nonlocal aliases
        key = id(node)
        if key in seen:
            aliases += 1
            if aliases > MAX_ALIASES:
                raise ConfigError(f"more than {MAX_ALIASES} YAML aliases: refused")
            return seen[key]
        if depth > 100:
            raise ConfigError("YAML nested more than 100 levels: refused")
        seen[key] = 1
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(n, depth + 1) for n in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        if total > MAX_NODES:
            raise ConfigError(f"the YAML expands to more than {MAX_NODES} nodes: refused")
        seen[key] = total
        return total

    if root is not None:
        size(root, 0)


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
    """Parsed YAML with unique keys and capped aliases; raises ConfigError or yaml.YAMLError."""
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"larger than {MAX_CONFIG_BYTES} bytes: not a configuration")
    return yaml.load(text, Loader=_StrictLoader)


def _read_text(path: Path) -> str:
    if not path.exists():
        raise ConfigError(f"cannot read config {path}: no such file")
    if not path.is_file():
        raise ConfigError(f"cannot read config {path}: not a regular file")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"cannot read config {path}: {err.strerror or err}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes: not a configuration")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (not UTF-8)") from None


def read_config(path: str | Path | None, strict: bool = False) -> tuple[SearchConfig, list[str]]:
    """(the defaults overridden by the YAML file at `path`, warning lines). OpenEvolve keys are
    translated; keys without an equivalent are one warning line, or an error when `strict`."""
    from evokernel.evolve.openevolve_config import translate

    if path is None:
        return SearchConfig(), []
    path = Path(path)
    text = _read_text(path)
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    try:
        native, report = translate(data, SearchConfig)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    if report.unknown:
        keys = ", ".join(f"'{k}'" for k in report.unknown)
        many = "s" if len(report.unknown) > 1 else ""
        raise ConfigError(f"{path}: unknown config key{many} {keys}")
    warnings = []
    if report.ignored:
        line = report.ignored_line(str(path))
        if strict:
            raise ConfigError(line + " (--strict)")
        warnings.append(line)
    try:
        return config_from_dict(native), warnings
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def load_config(path: str | Path | None) -> SearchConfig:
    """The defaults, overridden by the YAML file at `path` (None: defaults only); warnings
    about ignored OpenEvolve keys are dropped (`read_config` returns them)."""
    return read_config(path)[0]
