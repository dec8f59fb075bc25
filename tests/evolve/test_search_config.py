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
        ({"evaluator": {"cascade": "on"}}, "evaluator.cascade: auto or off"),
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
