"""OpenEvolve's `config.yaml`, read as this search's configuration.

    native, report = translate(data, SearchConfig)     # data: the parsed YAML mapping

A `--config` file may use this search's keys (`default_config.yaml`), OpenEvolve's keys
(its `configs/default_config.yaml`), or both. Every OpenEvolve key with an equivalent is
translated (`report.translated`: "openevolve key -> our key"); every OpenEvolve key without
one is listed in `report.ignored` with why, all together; a key that is neither ours nor
OpenEvolve's is listed in `report.unknown` (an error: a typo). `evolve` prints the ignored
keys as one warning line, or refuses them under `--strict`.

The equivalents (OpenEvolve -> ours):

  max_iterations                    budget.iterations
  random_seed (also database.)      seed
  early_stopping_patience           budget.patience (iterations without a better program)
  convergence_threshold             budget.min_improvement
  diff_based_evolution              mutators.weights: llm_diff (true) or llm_rewrite (false),
                                    when models are configured
  max_code_length                   mutators.max_code_chars
  llm.api_base, temperature, top_p, max_tokens, retries   the same keys under llm
  llm.timeout                       llm.timeout_s
  llm.retry_delay                   llm.backoff_base_s
  llm.api_key: "${VAR}"             llm.api_key_env: VAR (a literal key is never stored)
  llm.models[] / primary_model(_weight) / secondary_model(_weight)   llm.models[]
    (per model: name, weight, api_base, api_key "${VAR}", temperature, max_tokens;
     reasoning_effort -> extra_body)
  llm.reasoning_effort              extra_body.reasoning_effort of every model
  prompt.system_message             mutators.prompt.system_message
  prompt.num_top_programs + num_diverse_programs   selection.inspirations
  prompt.include_artifacts          mutators.prompt.include_artifacts
  prompt.max_artifact_bytes         mutators.prompt.max_artifact_chars
  database.num_islands              islands.count
  database.migration_interval       islands.migration_interval
  database.exploitation_ratio       selection.exploit
  database.exploration_ratio        selection.explore (random: the rest)
  database.feature_dimensions       grid.features: metric:<name> (an evaluator metric)
  database.feature_bins             grid.metric_bins
  evaluator.timeout                 evaluator.timeout_s
  evaluator.max_retries             backend.max_retries
  evaluator.memory_limit_mb         evaluator.memory_mb
  evaluator.cascade_evaluation      evaluator.cascade (true: auto, false: off)
  evaluator.cascade_thresholds      evaluator.cascade_thresholds
  evaluator.parallel_evaluations    evaluator.workers
  evaluator.enable_artifacts        mutators.prompt.include_artifacts

Keys whose behaviour this search has anyway are accepted silently (`MOOT`): every program is
checkpointed (checkpoint_interval), the database is the run directory (database.db_path,
in_memory, log_prompts, artifacts_base_path, ...), each evaluation is a fresh process
(max_tasks_per_child). The default of a key missing from an OpenEvolve file is ours.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from evokernel.errors import ConfigError
from evokernel.evolve.llm.config import ModelSpec

_ENV = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


@dataclass
class Report:
    translated: list[str] = field(default_factory=list)  # "openevolve key -> our key"
    ignored: list[str] = field(default_factory=list)  # "key (why)"
    unknown: list[str] = field(default_factory=list)  # neither ours nor OpenEvolve's

    @property
    def is_openevolve(self) -> bool:
        return bool(self.translated or self.ignored)

    def ignored_line(self, source: str) -> str:
        n = len(self.ignored)
        return (
            f"{source}: {n} OpenEvolve key{'s' if n != 1 else ''} without an equivalent here, "
            f"ignored: {'; '.join(self.ignored)}"
        )


# OpenEvolve keys whose behaviour the search has by design: accepted without a word.
MOOT = {
    "checkpoint_interval",
    "max_tasks_per_child",
    "language",
    "file_suffix",
    "database.db_path",
    "database.in_memory",
    "database.log_prompts",
    "database.artifacts_base_path",
    "database.artifact_size_threshold",
    "database.cleanup_old_artifacts",
    "database.artifact_retention_days",
    "database.random_seed",
    "evaluator.max_artifact_storage",
    "evaluator.distributed",
    "prompt.template_dir",
    "llm.random_seed",
    "llm.init_client",
}

# OpenEvolve keys without an equivalent, with why (shown to the user).
IGNORED = {
    "log_level": "logging is the progress lines and the run database",
    "log_dir": "everything is in the run directory",
    "diff_pattern": "SEARCH/REPLACE edits use a fixed, tolerant parser",
    "early_stopping_metric": "only the fitness (combined_score) can stop a run",
    "evolution_trace": "the run database holds every program, prompt and answer",
    "llm.evaluator_models": "no LLM feedback on programs",
    "llm.system_message": "set prompt.system_message",
    "prompt.evaluator_system_message": "no LLM feedback on programs",
    "prompt.use_template_stochasticity": "prompts are deterministic",
    "prompt.template_variations": "prompts are deterministic",
    "prompt.use_meta_prompting": "no meta-prompting",
    "prompt.meta_prompt_weight": "no meta-prompting",
    "prompt.artifact_security_filter": "artifacts are shown as text, capped",
    "prompt.suggest_simplification_after_chars": "no such hint in prompts",
    "prompt.include_changes_under_chars": "no such hint in prompts",
    "prompt.concise_implementation_max_lines": "no such hint in prompts",
    "prompt.comprehensive_implementation_min_lines": "no such hint in prompts",
    "prompt.code_length_threshold": "no such hint in prompts",
    "database.population_size": "the database keeps every program",
    "database.archive_size": "the database keeps every program",
    "database.elite_selection_ratio": "selection.elite_pool sets the elites",
    "database.migration_rate": "islands.migration_count sets how many elites migrate",
    "database.diversity_metric": "no code-diversity feature",
    "database.diversity_reference_size": "no code-diversity feature",
    "database.novelty_llm": "no novelty rejection",
    "database.embedding_model": "no novelty rejection",
    "database.similarity_threshold": "no novelty rejection (exact duplicates are skipped)",
    "evaluator.cpu_limit": "evaluator.workers bounds the parallel evaluations",
    "evaluator.use_llm_feedback": "no LLM feedback on programs",
    "evaluator.llm_feedback_weight": "no LLM feedback on programs",
}

_BUILTIN_FEATURES = {
    "complexity": "code length is not a feature here",
    "diversity": "no code-diversity feature",
}

_MODEL_KEYS = {"name", "weight", "api_base", "api_key", "temperature", "max_tokens", "top_p",
               "timeout", "retries", "retry_delay", "random_seed", "reasoning_effort",
               "system_message", "init_client"}  # fmt: skip


def _fields(cls: Any) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _section(tp: Any) -> Any:
    """The dataclass a field holds (directly or as `X | None`), or None."""
    for option in (tp, *typing.get_args(tp)):
        if dataclasses.is_dataclass(option) and isinstance(option, type):
            return option
    return None


def _native_unknown(cls: Any, data: Any, where: str, out: list[str]) -> None:
    """Keys of `data` the dataclass `cls` (and its nested sections) does not declare."""
    if not isinstance(data, dict):
        return
    fields = _fields(cls)
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            out.append(path)
            continue
        nested = _section(fields[key])
        if nested is not None:
            _native_unknown(nested, value, path, out)
        elif typing.get_origin(fields[key]) is list and isinstance(value, list):
            (item,) = typing.get_args(fields[key])
            if _section(item) is not None:
                for i, entry in enumerate(value):
                    _native_unknown(_section(item), entry, f"{path}[{i}]", out)


def _put(out: dict[str, Any], path: str, value: Any) -> None:
    node = out
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value


def _env_name(value: Any, key: str, report: Report) -> str | None:
    """`${VAR}` -> VAR; a literal key is refused (never stored in a run directory)."""
    if value is None:
        return None
    match = _ENV.match(str(value))
    if match:
        return match.group(1)
    report.ignored.append(f"{key} (a literal API key is never stored: export it and set "
                          f"llm.api_key_env to the variable's name)")  # fmt: skip
    return None


def translate(data: Any, schema: Any) -> tuple[dict[str, Any], Report]:
    """(our configuration as a mapping, what was translated, ignored, unknown). `schema`: the
    search's top-level configuration dataclass (config.SearchConfig; passed in, since that
    module reads files through this one)."""
    report = Report()
    if not isinstance(data, dict):
        return data, report
    ours = _fields(schema)
    native: dict[str, Any] = {}
    oe: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("llm", "evaluator") and isinstance(value, dict):
            section = _section(ours[key])
            mine = {k: v for k, v in value.items() if k in _fields(section)}
            theirs = {k: v for k, v in value.items() if k not in mine}
            if key == "llm" and "models" in value:
                mine.pop("models")
                theirs["models"] = value["models"]
            if mine:
                native[key] = mine
            if theirs:
                oe[key] = theirs
        elif key in ours:
            native[key] = value
        else:
            oe[key] = value
    unknown: list[str] = []
    _native_unknown(schema, native, "", unknown)
    _translate(oe, native, report)
    report.unknown = unknown + report.unknown
    return native, report


def _translate(oe: dict[str, Any], out: dict[str, Any], report: Report) -> None:
    def moved(src: str, dst: str, value: Any) -> None:
        _put(out, dst, value)
        report.translated.append(f"{src} -> {dst}")

    simple = {
        "max_iterations": "budget.iterations",
        "early_stopping_patience": "budget.patience",
        "convergence_threshold": "budget.min_improvement",
        "max_code_length": "mutators.max_code_chars",
    }
    for key, value in oe.items():
        if key in simple:
            if value is not None:
                moved(key, simple[key], value)
        elif key == "random_seed":
            if value is not None:
                moved(key, "seed", value)
        elif key == "diff_based_evolution":
            pass  # with the models, below
        elif key in ("llm", "prompt", "database", "evaluator"):
            if not isinstance(value, dict):
                report.unknown.append(f"{key} (expected a mapping)")
                continue
            for sub, v in value.items():
                path = f"{key}.{sub}"
                if path in MOOT:
                    continue
                if path in IGNORED:
                    report.ignored.append(f"{path} ({IGNORED[path]})")
                    continue
                handler = _SECTIONS[key]
                if not handler(sub, v, value, out, report, moved):
                    report.unknown.append(path)
        elif key in MOOT:
            if key == "language" and value not in (None, "python"):
                raise ConfigError(f"language: {value!r}: only Python programs are evolved here")
            if key == "file_suffix" and value not in (None, ".py"):
                raise ConfigError(f"file_suffix: {value!r}: only Python programs are evolved here")
        elif key in IGNORED:
            report.ignored.append(f"{key} ({IGNORED[key]})")
        else:
            report.unknown.append(key)
    models = out.get("llm", {}).get("models")
    if models and "diff_based_evolution" in oe and "weights" not in out.get("mutators", {}):
        mode = "llm_diff" if oe["diff_based_evolution"] is not False else "llm_rewrite"
        moved("diff_based_evolution", f"mutators.weights.{mode}", 1.0)
        _put(out, "mutators.weights", {mode: 1.0})
    elif models and "weights" not in out.get("mutators", {}):
        _put(out, "mutators.weights", {"llm_diff": 1.0})  # OpenEvolve's default: diffs


def _llm(sub: str, v: Any, section: dict, out: dict, report: Report, moved: Any) -> bool:
    same = {"api_base": "api_base", "temperature": "temperature", "top_p": "top_p",
            "max_tokens": "max_tokens", "retries": "retries", "timeout": "timeout_s",
            "retry_delay": "backoff_base_s"}  # fmt: skip
    if sub in same:
        if v is not None:
            moved(f"llm.{sub}", f"llm.{same[sub]}", v)
        return True
    if sub == "api_key":
        name = _env_name(v, "llm.api_key", report)
        if name:
            moved("llm.api_key", "llm.api_key_env", name)
        return True
    if sub == "reasoning_effort":
        return True  # applied to every model below
    if sub in ("primary_model", "primary_model_weight", "secondary_model",
               "secondary_model_weight"):  # fmt: skip
        if sub == "primary_model" and v:
            models = out.setdefault("llm", {}).setdefault("models", [])
            weight = section.get("primary_model_weight") or 1.0
            models.append(_model({"name": v, "weight": weight}, section, report, "llm"))
            report.translated.append("llm.primary_model -> llm.models[]")
        if sub == "secondary_model" and v:
            weight = section.get("secondary_model_weight")
            weight = 0.2 if weight is None else weight
            if weight > 0:
                models = out.setdefault("llm", {}).setdefault("models", [])
                models.append(_model({"name": v, "weight": weight}, section, report, "llm"))
                report.translated.append("llm.secondary_model -> llm.models[]")
        return True
    if sub == "models":
        if not isinstance(v, list):
            return False
        models = out.setdefault("llm", {}).setdefault("models", [])
        for i, entry in enumerate(v):
            if not isinstance(entry, dict):
                report.unknown.append(f"llm.models[{i}] (expected a mapping)")
                continue
            models.append(_model(entry, section, report, f"llm.models[{i}]"))
        return True
    return False


def _model(entry: dict, section: dict, report: Report, where: str) -> dict[str, Any]:
    """One OpenEvolve (or native) model entry as ours."""
    native = _fields(ModelSpec)
    model: dict[str, Any] = {}
    effort = entry.get("reasoning_effort", section.get("reasoning_effort"))
    if effort is not None:
        model["extra_body"] = {"reasoning_effort": effort}
    for key, value in entry.items():
        if key in native and key != "extra_body":
            if value is not None:
                model[key] = value
        elif key == "extra_body" and isinstance(value, dict):
            model["extra_body"] = {**model.get("extra_body", {}), **value}
        elif key == "api_key":
            name = _env_name(value, f"{where}.api_key", report)
            if name:
                model["api_key_env"] = name
        elif key in ("timeout", "retries", "retry_delay", "top_p", "random_seed",
                     "system_message", "init_client", "reasoning_effort"):  # fmt: skip
            if key not in ("reasoning_effort", "init_client", "random_seed") and value is not None:
                report.ignored.append(f"{where}.{key} (set per run under llm, not per model)")
        else:
            report.unknown.append(f"{where}.{key}")
    return model


def _prompt(sub: str, v: Any, section: dict, out: dict, report: Report, moved: Any) -> bool:
    if sub == "system_message":
        if v and v != "system_message":  # OpenEvolve's default names its built-in template
            moved("prompt.system_message", "mutators.prompt.system_message", str(v))
        return True
    if sub in ("num_top_programs", "num_diverse_programs"):
        if sub == "num_top_programs" or "num_top_programs" not in section:
            total = int(section.get("num_top_programs") or 0)
            total += int(section.get("num_diverse_programs") or 0)
            moved("prompt.num_top_programs + num_diverse_programs", "selection.inspirations",
                  total)  # fmt: skip
        return True
    if sub == "include_artifacts":
        moved("prompt.include_artifacts", "mutators.prompt.include_artifacts", v)
        return True
    if sub == "max_artifact_bytes":
        moved("prompt.max_artifact_bytes", "mutators.prompt.max_artifact_chars", v)
        return True
    return False


def _database(sub: str, v: Any, section: dict, out: dict, report: Report, moved: Any) -> bool:
    if sub == "num_islands":
        moved("database.num_islands", "islands.count", v)
    elif sub == "migration_interval":
        moved("database.migration_interval", "islands.migration_interval", v)
    elif sub in ("exploitation_ratio", "exploration_ratio"):
        if sub == "exploitation_ratio" or "exploitation_ratio" not in section:
            exploit = section.get("exploitation_ratio", 0.7)
            explore = section.get("exploration_ratio", 0.2)
            if all(isinstance(x, (int, float)) for x in (exploit, explore)):
                rest = round(1.0 - exploit - explore, 12)
                moved("database.exploitation_ratio", "selection.exploit", exploit)
                moved("database.exploration_ratio", "selection.explore", explore)
                _put(out, "selection.random", rest)
            else:
                report.unknown.append(f"database.{sub} (expected numbers)")
    elif sub == "feature_dimensions":
        if not isinstance(v, list):
            return False
        features = []
        for name in v:
            if name in _BUILTIN_FEATURES:
                report.ignored.append(f"database.feature_dimensions: {name} "
                                      f"({_BUILTIN_FEATURES[name]})")  # fmt: skip
            else:
                features.append(f"metric:{'combined_score' if name == 'score' else name}")
        if features:
            moved("database.feature_dimensions", "grid.features", features)
    elif sub == "feature_bins":
        moved("database.feature_bins", "grid.metric_bins", v)
    else:
        return False
    return True


def _evaluator(sub: str, v: Any, section: dict, out: dict, report: Report, moved: Any) -> bool:
    same = {"timeout": "evaluator.timeout_s", "max_retries": "backend.max_retries",
            "parallel_evaluations": "evaluator.workers",
            "cascade_thresholds": "evaluator.cascade_thresholds"}  # fmt: skip
    if sub in same:
        moved(f"evaluator.{sub}", same[sub], v)
    elif sub == "memory_limit_mb":
        if v is not None:
            moved("evaluator.memory_limit_mb", "evaluator.memory_mb", v)
    elif sub == "cascade_evaluation":
        moved("evaluator.cascade_evaluation", "evaluator.cascade", v)
    elif sub == "enable_artifacts":
        if v is False:
            moved("evaluator.enable_artifacts", "mutators.prompt.include_artifacts", False)
    else:
        return False
    return True


_SECTIONS = {"llm": _llm, "prompt": _prompt, "database": _database, "evaluator": _evaluator}
