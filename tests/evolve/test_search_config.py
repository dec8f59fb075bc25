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
        ({"islands": {"count": 0}}, "islands.count must be >= 1"),
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
