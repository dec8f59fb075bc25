"""Every bad checkpoint is one CheckpointError line naming the problem, through the API and
through the CLI (non-zero exit, one line on stderr, no traceback), and fails before any tensor
is copied."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from model_helpers import edit_json, edit_tensors, header_span, rewrite_header
from safetensors.torch import load_file

from evokernel.cli import main
from evokernel.errors import CheckpointError
from evokernel.model import loader
from evokernel.model.loader import load_model
from evokernel.model.random import write_random_checkpoint

UP = "model.layers.1.mlp.up_proj.weight"


def _missing_tensor(d: Path) -> None:
    edit_tensors(d / "model.safetensors", **{UP.replace(".", "__"): None})


def _extra_tensor(d: Path) -> None:
    edit_tensors(d / "model.safetensors", model__layers__2__mlp__up_proj__weight=torch.zeros(3))


def _wrong_shape(d: Path) -> None:
    edit_tensors(
        d / "model.safetensors", model__layers__0__self_attn__k_proj__weight=torch.zeros(32, 64)
    )


def _unsupported_dtype(d: Path) -> None:
    edit_tensors(d / "model.safetensors", model__norm__weight=torch.ones(64, dtype=torch.float64))


def _truncated_data(d: Path) -> None:
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])


def _truncated_header(d: Path) -> None:
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:40])


def _truncated_prefix(d: Path) -> None:
    (d / "model.safetensors").write_bytes(b"\x10\x00\x00")


def _corrupt_header_json(d: Path) -> None:
    f = d / "model.safetensors"
    data = bytearray(f.read_bytes())
    start, _ = header_span(f)
    data[start] = ord("[")  # the header's opening brace becomes a bracket
    data[start + 1] = ord("}")
    f.write_bytes(bytes(data))


def _huge_header_length(d: Path) -> None:
    f = d / "model.safetensors"
    f.write_bytes((2**40).to_bytes(8, "little") + f.read_bytes()[8:])


def _bad_offsets(d: Path) -> None:
    def grow(header: dict) -> None:
        begin, stop = header["model.norm.weight"]["data_offsets"]
        header["model.norm.weight"]["data_offsets"] = [begin, stop + 2]

    rewrite_header(d / "model.safetensors", grow)


def _missing_shard(d: Path) -> None:
    (d / "model-00002-of-00003.safetensors").unlink()


def _index_points_to_wrong_shard(d: Path) -> None:
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.embed_tokens.weight"] = "model-00003-of-00003.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(index))


def _index_not_json(d: Path) -> None:
    (d / "model.safetensors.index.json").write_text("{'weight_map': ")


def _no_weights(d: Path) -> None:
    (d / "model.safetensors").unlink()


def _config_not_json(d: Path) -> None:
    (d / "config.json").write_text("{")


def _model_type(d: Path) -> None:
    edit_json(d / "config.json", model_type="gemma2")


def _moe(d: Path) -> None:
    edit_json(d / "config.json", model_type="qwen3_moe")


def _llama_without_qk_norm(d: Path) -> None:
    """A qwen3 checkpoint relabelled llama: its q/k norm tensors have no place in a llama."""
    edit_json(d / "config.json", model_type="llama")


def _rope_scaling(d: Path) -> None:
    edit_json(d / "config.json", rope_scaling={"rope_type": "yarn", "factor": 4.0})


def _rope_parameters(d: Path) -> None:
    edit_json(d / "config.json", rope_parameters={"rope_type": "dynamic", "factor": 2.0})


def _rope_llama3_incomplete(d: Path) -> None:
    edit_json(d / "config.json", rope_parameters={"rope_type": "llama3", "factor": 8.0})


def _sliding_window(d: Path) -> None:
    edit_json(d / "config.json", use_sliding_window=True, sliding_window=64)


def _sliding_layer(d: Path) -> None:
    edit_json(d / "config.json", layer_types=["full_attention", "sliding_attention"])


def _untied_without_head(d: Path) -> None:
    edit_json(d / "config.json", tie_word_embeddings=False)


def _bad_heads(d: Path) -> None:
    edit_json(d / "config.json", num_key_value_heads=3)


def _generation_config_not_json(d: Path) -> None:
    (d / "generation_config.json").write_text("eos")


CASES: dict[str, tuple[Callable[[Path], None], dict[str, object], str]] = {
    # name: (break it, checkpoint options, expected message fragment)
    "missing tensor": (_missing_tensor, {}, f"missing tensor {UP!r}"),
    "extra tensor": (
        _extra_tensor,
        {},
        "unexpected tensor 'model.layers.2.mlp.up_proj.weight'; config.json describes 2 layers",
    ),
    "wrong shape": (
        _wrong_shape,
        {},
        "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [32, 64], "
        "config.json implies [64, 64]",
    ),
    "unsupported dtype": (
        _unsupported_dtype,
        {},
        "tensor 'model.norm.weight' has dtype F64; supported: BF16, F16, F32",
    ),
    "truncated data": (_truncated_data, {}, "truncated file: data ends at byte"),
    "truncated header": (_truncated_header, {}, "runs past the end of the file (40 bytes)"),
    "truncated prefix": (_truncated_prefix, {}, "no 8-byte header length"),
    "corrupt header json": (_corrupt_header_json, {}, "corrupt header: not valid JSON"),
    "huge header length": (_huge_header_length, {}, "exceeds the 100000000-byte limit"),
    "bad data offsets": (
        _bad_offsets,
        {},
        "tensor 'model.norm.weight': corrupt header: data_offsets",
    ),
    "missing shard": (
        _missing_shard,
        {"shards": 3},
        "shard 'model-00002-of-00003.safetensors' (holding",
    ),
    "index points to wrong shard": (
        _index_points_to_wrong_shard,
        {"shards": 3},
        "tensor 'model.embed_tokens.weight' is mapped to shard "
        "'model-00003-of-00003.safetensors', which does not hold it",
    ),
    "index not json": (_index_not_json, {"shards": 2}, "index.json: not valid JSON"),
    "no weights": (_no_weights, {}, "no model.safetensors or model.safetensors.index.json"),
    "config not json": (_config_not_json, {}, "config.json: not valid JSON"),
    "model type": (
        _model_type,
        {},
        "unsupported model_type 'gemma2' (gemma's norm offset, soft-capping and sliding windows "
        "are not supported); supported: llama, mistral, qwen2, qwen3",
    ),
    "moe": (_moe, {}, "unsupported model_type 'qwen3_moe' (mixture-of-experts layers"),
    "family's tensors": (
        _llama_without_qk_norm,
        {},
        "unexpected tensor 'model.layers.0.self_attn.q_norm.weight'",
    ),
    "rope scaling": (_rope_scaling, {}, "unsupported rope_scaling.rope_type 'yarn'"),
    "rope parameters": (_rope_parameters, {}, "unsupported rope_parameters.rope_type 'dynamic'"),
    "rope llama3 incomplete": (
        _rope_llama3_incomplete,
        {},
        "rope_parameters: rope scaling (llama3) needs finite positive factor, low_freq_factor",
    ),
    "sliding window": (_sliding_window, {}, "use_sliding_window=true is not supported"),
    "sliding layer": (_sliding_layer, {}, "layer_types[1] is 'sliding_attention'"),
    "untied without head": (
        _untied_without_head,
        {},
        "missing tensor 'lm_head.weight' (config.json has tie_word_embeddings=false)",
    ),
    "bad kv heads": (_bad_heads, {}, "num_attention_heads (4) is not a multiple of"),
    "generation config": (
        _generation_config_not_json,
        {},
        "generation_config.json: not valid JSON",
    ),
}


@pytest.fixture(params=list(CASES))
def broken(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    corrupt, options, message = CASES[request.param]
    path = write_random_checkpoint(tmp_path / "ckpt", "tiny", **options)
    corrupt(path)
    return path, message


def test_api_raises_one_line_before_copying(
    broken: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, message = broken
    copies: list[object] = []
    monkeypatch.setattr(loader, "_copy_one", lambda src, dst: copies.append(dst))
    with pytest.raises(CheckpointError) as err:
        load_model(path, "cpu", torch.float32)
    text = str(err.value)
    assert message in text
    assert "\n" not in text
    assert copies == []


def test_cli_prints_one_line_and_fails(
    broken: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, message = broken
    code = main(["model", "info", str(path)])
    out, err = capsys.readouterr()
    assert code != 0
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert message in lines[0]


def test_shard_tensor_the_index_does_not_list(tmp_path: Path) -> None:
    path = write_random_checkpoint(tmp_path, "tiny", shards=2)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    del index["weight_map"]["model.norm.weight"]
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"holds tensor 'model\.norm\.weight', which"):
        load_model(path, "cpu", torch.float32)


def test_overlapping_tensors(tiny_copy: Path) -> None:
    def overlap(header: dict) -> None:
        a, b = header["model.norm.weight"], header["model.layers.0.input_layernorm.weight"]
        b["data_offsets"] = list(a["data_offsets"])

    rewrite_header(tiny_copy / "model.safetensors", overlap)
    with pytest.raises(CheckpointError, match="overlap"):
        load_model(tiny_copy, "cpu", torch.float32)


def test_missing_directory_and_config(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not a directory"):
        load_model(tmp_path / "nope")
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        load_model(tmp_path)


def test_valid_checkpoint_still_loads_after_unrelated_files(tiny_copy: Path) -> None:
    (tiny_copy / "README.md").write_text("notes")
    (tiny_copy / "optimizer.pt").write_bytes(b"\0" * 16)
    cfg, w = load_model(tiny_copy, "cpu", torch.float32)
    raw = load_file(tiny_copy / "model.safetensors")
    assert torch.equal(w.final_norm, raw["model.norm.weight"].float())
    assert cfg.num_hidden_layers == 2
