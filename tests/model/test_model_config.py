"""Config parsing: both HF layouts, transformers' defaults for absent keys, refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evokernel.errors import CheckpointError
from evokernel.model.config import ModelConfig, read_generation_eos
from evokernel.model.presets import PRESETS

HUB_06B = {  # Qwen/Qwen3-0.6B config.json as published (legacy layout)
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


def test_hub_config_equals_the_preset() -> None:
    cfg = ModelConfig.from_hf_dict(HUB_06B)
    preset = ModelConfig(**PRESETS["qwen3-0.6b"], bos_token_id=151643, eos_token_ids=(151645,))
    assert cfg == preset


@pytest.mark.parametrize("layout", ["transformers5", "legacy"])
def test_to_hf_dict_round_trips(layout: str) -> None:
    cfg = ModelConfig.from_hf_dict(HUB_06B)
    again = ModelConfig.from_hf_dict(cfg.to_hf_dict(layout))
    assert again == cfg


def test_absent_keys_take_transformers_defaults() -> None:
    from transformers import Qwen3Config as HFConfig

    d: dict[str, Any] = {
        "model_type": "qwen3",
        "vocab_size": 1000,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 64,
    }
    ours = ModelConfig.from_hf_dict(d)
    hf = HFConfig(**{k: v for k, v in d.items() if k != "model_type"})
    assert ours.head_dim == hf.head_dim == 128
    assert ours.num_key_value_heads == hf.num_key_value_heads == 32
    assert ours.rope_theta == hf.rope_parameters["rope_theta"] == 10000.0
    assert ours.max_position_embeddings == hf.max_position_embeddings
    assert ours.tie_word_embeddings is hf.tie_word_embeddings is False
    assert ours.rms_norm_eps == hf.rms_norm_eps


def test_rope_parameters_win_over_top_level_theta() -> None:
    d = HUB_06B | {"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}
    d.pop("rope_scaling")
    assert ModelConfig.from_hf_dict(d).rope_theta == 5e5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rope_scaling": {"type": "dynamic", "factor": 2}}, "rope_scaling.rope_type 'dynamic'"),
        ({"rope_scaling": "yarn"}, "rope_scaling must be an object or null"),
        (
            {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}},
            "partial_rotary_factor 0.5",
        ),
        ({"hidden_act": "gelu"}, "unsupported hidden_act 'gelu'"),
        ({"attention_bias": True}, "attention_bias=true"),
        ({"num_hidden_layers": 0}, "num_hidden_layers must be a positive integer, got 0"),
        ({"vocab_size": "big"}, "vocab_size must be a positive integer"),
        ({"rms_norm_eps": "tiny"}, "rms_norm_eps has the wrong type"),
        ({"torch_dtype": "int8"}, "unsupported dtype 'int8'"),
        ({"bos_token_id": -1}, "bos_token_id -1 is not a token id below vocab_size"),
        ({"layer_types": ["full_attention"]}, "layer_types has 1 entries; num_hidden_layers is 28"),
        ({"rope_theta": float("inf")}, "rope_theta must be finite and > 0, got inf"),
        ({"rms_norm_eps": float("nan")}, "rms_norm_eps must be finite and > 0, got nan"),
        ({"rope_theta": 10**400}, "rope_theta is out of range for a float"),
        ({"rms_norm_eps": 10**400}, "rms_norm_eps is out of range for a float"),
        ({"eos_token_id": [151645, "x"]}, "eos_token_id must hold token ids"),
    ],
)
def test_refusals_name_the_key(change: dict, message: str) -> None:
    with pytest.raises(CheckpointError) as err:
        ModelConfig.from_hf_dict(HUB_06B | change, source="some/config.json")
    text = str(err.value)
    assert text.startswith("some/config.json: ") and message in text


def test_generation_config_eos_ids(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(HUB_06B))
    assert read_generation_eos(tmp_path) == ()
    assert ModelConfig.from_dir(tmp_path).eos_token_ids == (151645,)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 151643}))
    assert ModelConfig.from_dir(tmp_path).eos_token_ids == (151645, 151643)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643]}))
    assert ModelConfig.from_dir(tmp_path).eos_token_ids == (151645, 151643)


def test_ids_outside_the_vocabulary_are_dropped_with_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hub config.json on a smaller vocabulary: transformers loads it, and so do we."""
    small = HUB_06B | {"vocab_size": 1000, "eos_token_id": [151645, 7]}
    (tmp_path / "config.json").write_text(json.dumps(small))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [300000, 9]}))
    for _ in range(2):
        cfg = ModelConfig.from_dir(tmp_path)
        assert cfg.eos_token_ids == (7, 9) and cfg.bos_token_id is None
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {tmp_path}: token ids outside the vocabulary [0, 1000) ignored: "
        "config.json eos_token_id 151645; config.json bos_token_id 151643; "
        "generation_config.json eos_token_id 300000"
    ]
