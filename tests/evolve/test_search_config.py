"""The search's YAML config: defaults documented key by key, strict validation."""

from __future__ import annotations

import re

import pytest
import yaml

from evokernel.errors import ConfigError
from evokernel.evolve.config import DEFAULT_CONFIG, SearchConfig, config_from_dict, load_config


def _keys(d, prefix=""):
    out = set()
    for k, v in d.items():
        out.add(prefix + k)
        if isinstance(v, dict) and k != "weights":
            out |= _keys(v, f"{prefix}{k}.")
    return out


def test_default_file_equals_the_defaults_and_lists_every_key():
    assert load_config(DEFAULT_CONFIG) == SearchConfig()
    in_file = _keys(yaml.safe_load(DEFAULT_CONFIG.read_text()))
    assert in_file == _keys(SearchConfig().to_dict())


def test_every_key_in_the_default_file_is_commented():
    lines = DEFAULT_CONFIG.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\s*[A-Za-z_]+:", line):
            above = lines[i - 1].strip() if i else ""
            assert above.startswith("#") or " # " in line, f"uncommented key: {line.strip()}"


def test_saved_config_round_trips():
    cfg = config_from_dict({"seed": 3, "islands": {"count": 2}, "grid": {"features": ["knob:A"]}})
    assert config_from_dict(yaml.safe_load(cfg.to_yaml())) == cfg


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"isands": {}}, "unknown config key 'isands'"),
        ({"islands": {"cuont": 2}}, "unknown config key 'islands.cuont'"),
        ({"islands": {"count": "four"}}, "islands.count: expected an integer"),
        ({"islands": {"count": 0}}, "islands.count must be in [1, 1024], got 0"),
        ({"islands": {"count": 10**14}}, "islands.count must be in [1, 1024]"),
        ({"evaluator": {"workers": 10**9}}, "evaluator.workers must be in [0, 4096]"),
        ({"in_flight": -1}, "in_flight must be in [0, 4096]"),
        ({"llm": {"max_concurrency": 10**9}}, "llm.max_concurrency must be in [1, 1024]"),
        ({"seed": 2**70}, "seed: 1180591620717411303424 is out of range"),
        ({"seed": -1}, "seed must be in [0, 9223372036854775807]"),
        ({"evaluator": {"timeout_s": float("inf")}}, "evaluator.timeout_s: expected a finite"),
        ({"budget": {"cost_usd": float("nan")}}, "budget.cost_usd: expected a finite number"),
        ({"budget": {"iterations": 10**20}}, "budget.iterations: 100000000000000000000 is out"),
        ({"budget": {"iterations": 2_000_000}}, "budget.iterations must be in [0, 1000000]"),
        ({"evaluator": {"memory_mb": 10**12}}, "evaluator.memory_mb must be in [256, 16777216]"),
        ({"evaluator": {"cascade": "sometimes"}}, "evaluator.cascade: auto or off"),
        ({"backend": {"kind": "slurm"}}, "backend.kind: 'slurm' is not one of local, ray"),
        ({"backend": {"address": " "}}, "backend.address must not be empty"),
        ({"backend": {"max_retries": -1}}, "backend.max_retries must be in [0, 100]"),
        ({"mutators": {"prompt": {"template_dir": "/nonexistent"}}}, "no such directory"),
        ({"mutators": {"weights": {"offline": float("inf")}}}, "expected a finite number"),
        ({"llm": {"models": [{"weight": 1}]}}, "llm.models[0].name is required"),
        ([1, 2], "the top level: expected a mapping"),
        ({"selection": {"exploit": 0.9}}, "must be 1"),
        ({"grid": {"features": ["size:x"]}}, "grid.features"),
        ({"grid": {"bins": [1.0, 0.5]}}, "strictly increasing"),
        ({"mutators": {"weights": {"magic": 1.0}}}, "unknown mutator 'magic'"),
        ({"mutators": {"weights": {"llm_diff": 1.0}}}, "llm.models"),
        ({"mutators": {"offline": {"jump_prob": 2}}}, "jump_prob"),
        ({"llm": {"api_base": "ftp://x"}}, "api_base"),
        ({"llm": {"modles": []}}, "modles"),
        ({"budget": {"iterations": -1}}, "budget.iterations"),
        ({"checkpoint": {"synchronous": "off"}}, "checkpoint.synchronous"),
    ],
)
def test_bad_configs_name_the_key(data, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_from_dict(data)


def test_config_file_errors_name_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("islands:\n  count: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)
    path.write_text("budget:\n  iteratons: 3\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: unknown config key 'budget\.iteratons'"):
        load_config(path)


OPENEVOLVE_CONFIG = """
max_iterations: 40
checkpoint_interval: 5          # moot: every iteration is checkpointed
log_level: INFO                 # no equivalent
random_seed: 7
diff_based_evolution: false
max_code_length: 5000
early_stopping_patience: 12
convergence_threshold: 0.001
llm:
  api_base: http://127.0.0.1:8000/v1
  api_key: ${MY_KEY}
  temperature: 0.5
  timeout: 30
  retry_delay: 2
  reasoning_effort: low
  primary_model: big
  primary_model_weight: 0.8
  secondary_model: small
  secondary_model_weight: 0.2
prompt:
  system_message: Improve the search.
  num_top_programs: 2
  num_diverse_programs: 1
  include_artifacts: true
  use_meta_prompting: true      # no equivalent
database:
  population_size: 50           # no equivalent
  num_islands: 3
  migration_interval: 10
  exploitation_ratio: 0.6
  exploration_ratio: 0.3
  feature_dimensions: [complexity, runtime]
  feature_bins: {runtime: 4}
  in_memory: true               # moot
evaluator:
  timeout: 60
  cascade_evaluation: off       # YAML 1.1 boolean where a mode is expected
  cascade_thresholds: [0.4, 0.8]
  parallel_evaluations: 2
  memory_limit_mb: 2048
  use_llm_feedback: true        # no equivalent
islands:                        # ours, beside OpenEvolve's
  migration_count: 1
"""


def test_an_openevolve_config_is_translated_and_the_rest_listed_at_once(tmp_path):
    from evokernel.evolve.config import read_config

    path = tmp_path / "oe.yaml"
    path.write_text(OPENEVOLVE_CONFIG)
    cfg, warnings = read_config(path)
    assert cfg.budget.iterations == 40 and cfg.seed == 7
    assert cfg.budget.patience == 12 and cfg.budget.min_improvement == 0.001
    assert cfg.mutators.max_code_chars == 5000
    assert cfg.mutators.weights == {"llm_rewrite": 1.0}  # diff_based_evolution: false
    assert [(m.name, m.weight) for m in cfg.llm.models] == [("big", 0.8), ("small", 0.2)]
    assert all(m.extra_body == {"reasoning_effort": "low"} for m in cfg.llm.models)
    assert cfg.llm.api_key_env == "MY_KEY" and cfg.llm.timeout_s == 30
    assert cfg.llm.backoff_base_s == 2 and cfg.llm.temperature == 0.5
    assert cfg.mutators.prompt.system_message == "Improve the search."
    assert cfg.selection.inspirations == 3
    assert (cfg.selection.exploit, cfg.selection.explore) == (0.6, 0.3)
    assert cfg.selection.random == pytest.approx(0.1)
    assert cfg.islands.count == 3 and cfg.islands.migration_interval == 10
    assert cfg.islands.migration_count == 1
    assert cfg.grid.features == ["metric:runtime"] and cfg.grid.metric_bins == {"runtime": 4}
    assert cfg.evaluator.cascade == "off" and cfg.evaluator.cascade_thresholds == [0.4, 0.8]
    assert cfg.evaluator.workers == 2 and cfg.evaluator.timeout_s == 60
    assert cfg.evaluator.memory_mb == 2048
    (line,) = warnings
    for key in ("log_level", "prompt.use_meta_prompting", "database.population_size",
                "evaluator.use_llm_feedback", "feature_dimensions: complexity"):  # fmt: skip
        assert key in line
    for key in ("checkpoint_interval", "in_memory", "max_iterations"):
        assert key not in line
    with pytest.raises(ConfigError, match=r"--strict"):
        read_config(path, strict=True)


def test_unknown_keys_are_listed_together_and_a_literal_key_is_never_kept(tmp_path):
    from evokernel.evolve.config import read_config

    path = tmp_path / "typos.yaml"
    path.write_text("islands:\n  cuont: 3\nmax_iteratons: 5\ndatabase:\n  num_isles: 2\n")
    with pytest.raises(ConfigError) as err:
        read_config(path)
    assert str(err.value).endswith(
        "unknown config keys 'islands.cuont', 'max_iteratons', 'database.num_isles'"
    )
    path.write_text("llm:\n  api_key: sk-secret\n  primary_model: m\n")
    cfg, (line,) = read_config(path)
    assert "llm.api_key (a literal API key is never stored" in line and "sk-secret" not in line
    assert "sk-secret" not in cfg.to_yaml()


@pytest.mark.parametrize("text", ["evaluator:\n  cascade: off\n", "evaluator:\n  cascade: no\n"])
def test_yaml_11_booleans_work_where_a_mode_is_expected(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert load_config(path).evaluator.cascade == "off"
    path.write_text("evaluator:\n  cascade: on\n")
    assert load_config(path).evaluator.cascade == "auto"


def test_an_alias_bomb_is_refused_fast_in_one_line(tmp_path):
    import time

    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert len(path.read_bytes()) < 700
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert time.monotonic() - start < 1.0
    assert "refused" in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "big.yaml").write_text("x: " + "y" * (2 << 20))
    with pytest.raises(ConfigError, match="larger than"):
        load_config(tmp_path / "big.yaml")
