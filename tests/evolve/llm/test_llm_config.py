"""LLM, offline and prompt config sections: built from parsed YAML, bad keys and values named."""

from __future__ import annotations

import pytest

from evokernel.errors import ConfigError
from evokernel.evolve.llm.config import LLMBudget, LLMConfig, ModelSpec
from evokernel.evolve.mutators.config import OfflineConfig, PromptConfig


def test_from_dict_builds_nested_models(monkeypatch):
    cfg = LLMConfig.from_dict(
        {
            "api_base": "https://api.example.com/v1/",
            "api_key_env": "MY_KEY",
            "models": [
                {"name": "small", "weight": 3, "prompt_usd_per_mtok": 0.1},
                {"name": "big", "api_base": "http://127.0.0.1:9/v1", "extra_body": {"a": {"b": 1}}},
            ],
            "retries": 5,
        }
    )
    small, big = cfg.models
    assert isinstance(small, ModelSpec) and small.weight == 3 and big.extra_body == {"a": {"b": 1}}
    assert cfg.endpoint(small) == "https://api.example.com/v1/chat/completions"
    assert cfg.endpoint(big) == "http://127.0.0.1:9/v1/chat/completions"
    monkeypatch.setenv("MY_KEY", "k")
    assert cfg.api_key(small) == "k" and cfg.enabled
    assert not LLMConfig.from_dict(None).enabled
    assert small.cost(1_000_000, 0) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"modles": []}, "unknown config key 'llm.modles'"),
        ({"models": [{"name": "a", "wieght": 1}]}, "unknown config key 'llm.models[0].wieght'"),
        ({"models": [{"weight": 1}]}, "name"),
        ({"models": [{"name": "a"}, {"name": "a"}]}, "appears twice"),
        ({"models": [{"name": "a", "weight": 0}]}, "at least one weight"),
        ({"models": [{"name": "a", "weight": -1}]}, "weight must be >= 0"),
        ({"models": {"name": "a"}}, "expected a list"),
        ({"temperature": 3}, "temperature"),
        ({"api_base": "localhost:8000"}, "http(s) URL"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"retries": -1}, "retries"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_bad_llm_config(data, needle):
    with pytest.raises(ConfigError) as err:
        LLMConfig.from_dict(data)
    assert needle in str(err.value)


def test_budget_and_offline_and_prompt_sections():
    with pytest.raises(ConfigError, match="tokens must be >= 0"):
        LLMBudget(tokens=-1)
    assert OfflineConfig.from_dict({"transform_prob": 0.5}).transform_prob == 0.5
    with pytest.raises(ConfigError, match="unknown"):
        OfflineConfig.from_dict({"transforms": ["exp3"]})
    with pytest.raises(ConfigError, match="probability"):
        OfflineConfig.from_dict({"jump_prob": 1.5})
    with pytest.raises(ConfigError, match=r"unknown config key 'mutators\.prompt\.max_char'"):
        PromptConfig.from_dict({"max_char": 10})
    assert PromptConfig.from_dict({"max_insights": 0}).max_insights == 0
