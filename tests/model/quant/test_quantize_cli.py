"""`evokernel quantize`: what it writes (layouts other loaders read, the head's format in
the config, the directory's other files) and what it refuses, in one line each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from evokernel.cli import main
from evokernel.model.loader import load_model
from evokernel.model.quant.packed import Fp8Weight, Int4Weight, Int8Weight


def _refused(capsys, argv: list[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    "flags,words",
    [
        (["--format", "fp8", "--head", "int8"], ["--head int8", "fp8 layout", "bf16 or fp8"]),
        (["--format", "int4", "--head", "fp8"], ["--head fp8", "gptq layout", "int8 or int4"]),
        (["--format", "int4", "--layout", "awq", "--head", "int8"], ["awq layout", "bf16"]),
        (["--format", "int8", "--layout", "awq"], ["--layout awq", "int8 is written as gptq"]),
        (["--format", "fp8", "--layout", "gptq"], ["--layout gptq", "FP8 blocks", "compressed"]),
        (
            ["--format", "int8", "--layout", "autofp8"],
            ["--layout autofp8", "int8 is written as gptq"],
        ),
        (
            ["--format", "fp8", "--layout", "awq"],
            ["--layout awq", "fp8 is written as", "FP8 blocks"],
        ),
        (
            ["--format", "fp8", "--layout", "autofp8", "--head", "int4"],
            ["--head int4", "autofp8 layout", "bf16 or fp8"],
        ),
        (
            ["--format", "fp8", "--layout", "compressed-tensors", "--head", "int8"],
            ["--head int8", "compressed-tensors layout", "bf16 or fp8"],
        ),
        (
            ["--format", "int4", "--layout", "compressed-tensors", "--head", "fp8"],
            ["--head fp8", "compressed-tensors layout", "int8 or int4"],
        ),
        (["--format", "int4", "--group-size", "100"], ["--group-size 100", "multiple of 8"]),
        (["--format", "fp8", "--group-size", "64"], ["--group-size", "int8 and int4"]),
        (["--format", "int4", "--group-size", "x"], ["--group-size", "expected an integer"]),
    ],
)
def test_bad_combinations_are_refused(tiny_dir, tmp_path, capsys, flags, words) -> None:
    out = tmp_path / "q"
    err = _refused(capsys, ["quantize", "--model", str(tiny_dir), "--out", str(out), *flags])
    for word in words:
        assert word in err, (word, err)
    assert not out.exists()


def test_quantized_input_non_empty_output_and_odd_shapes_are_refused(tiny_dir, tmp_path, capsys):
    q = tmp_path / "q"
    assert main(["quantize", "--model", str(tiny_dir), "--out", str(q), "--format", "int8"]) == 0
    capsys.readouterr()
    err = _refused(capsys, ["quantize", "--model", str(q), "--out", str(tmp_path / "r"),
                            "--format", "int4"])  # fmt: skip
    assert "already quantized (quant_method gptq)" in err
    err = _refused(capsys, ["quantize", "--model", str(tiny_dir), "--out", str(q),
                            "--format", "int4"])  # fmt: skip
    assert "not empty" in err
    from evokernel.model.random import write_random_checkpoint

    odd = write_random_checkpoint(tmp_path / "odd", "tiny", hidden=60)
    err = _refused(capsys, ["quantize", "--model", str(odd), "--out", str(tmp_path / "o"),
                            "--format", "int4"])  # fmt: skip
    assert "cannot be stored as gptq int4-g128" in err and not (tmp_path / "o").exists()


def test_what_each_format_writes(tiny_dir: Path, tmp_path: Path, capsys) -> None:
    cases = {
        "fp8": (["--format", "fp8", "--head", "fp8"], Fp8Weight, Fp8Weight),
        "int8": (["--format", "int8", "--group-size", "-1"], Int8Weight, torch.Tensor),
        "int4": (["--format", "int4", "--head", "int8", "--asym", "--group-size", "32"],
                 Int4Weight, Int8Weight),
        "awq": (["--format", "int4", "--layout", "awq", "--group-size", "64"], Int4Weight,
                torch.Tensor),
        "int4-head4": (["--format", "int4", "--head", "int4"], Int4Weight, Int4Weight),
        "int8-head4": (["--format", "int8", "--head", "int4"], Int8Weight, Int4Weight),
    }  # fmt: skip
    for name, (flags, body, head) in cases.items():
        out = tmp_path / name
        assert main(["quantize", "--model", str(tiny_dir), "--out", str(out), *flags,
                     "--json"]) == 0  # fmt: skip
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert summary["method"] == "round-to-nearest"
        assert set(summary["copied"]) >= {"generation_config.json", "tokenizer.json"}
        config = json.loads((out / "config.json").read_text())
        source = json.loads((tiny_dir / "config.json").read_text())
        assert {k: v for k, v in config.items() if k not in ("quantization_config",
                "tie_word_embeddings")} == {k: v for k, v in source.items()
                                           if k != "tie_word_embeddings"}  # fmt: skip
        _, w = load_model(out, dtype=torch.float32)
        assert isinstance(w.layers[0].down_proj, body), name
        assert isinstance(w.lm_head, head), name
        assert config["tie_word_embeddings"] is (head is torch.Tensor)
    qc = json.loads((tmp_path / "int4" / "config.json").read_text())["quantization_config"]
    assert qc["lm_head"] is True and qc["dynamic"] == {"+:lm_head": {"bits": 8}}
    assert qc["sym"] is False and qc["checkpoint_format"] == "gptq"
    qc = json.loads((tmp_path / "int4-head4" / "config.json").read_text())["quantization_config"]
    assert qc["lm_head"] is True and "dynamic" not in qc  # the head takes the body's 4 bits
    qc = json.loads((tmp_path / "int8-head4" / "config.json").read_text())["quantization_config"]
    assert qc["lm_head"] is True and qc["dynamic"] == {"+:lm_head": {"bits": 4}}
    qc = json.loads((tmp_path / "fp8" / "config.json").read_text())["quantization_config"]
    assert qc["modules_to_not_convert"] == [] and qc["weight_block_size"] == [128, 128]
    with safe_open(tmp_path / "fp8" / "model.safetensors", "pt") as f:
        assert f.get_tensor("lm_head.weight").dtype == torch.float8_e4m3fn
        assert f.get_tensor("lm_head.weight_scale_inv").dtype == torch.float32


def test_transformers_reads_the_configs_it_knows(tiny_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoConfig

    for flags in (["--format", "int4", "--head", "int8"], ["--format", "fp8"],
                  ["--format", "int4", "--layout", "awq", "--group-size", "32"]):  # fmt: skip
        out = tmp_path / "_".join(flags).replace("-", "")
        assert main(["quantize", "--model", str(tiny_dir), "--out", str(out), *flags]) == 0
        config = AutoConfig.from_pretrained(out)
        assert config.quantization_config["quant_method"] in ("gptq", "fp8", "awq")


def test_the_compressed_tensors_layout_and_its_summary_line(tiny_dir, tmp_path, capsys) -> None:
    """`--layout compressed-tensors`: the config llm-compressor writes (a second group for a
    head of the other width) and the summary line naming the format and the body's weights."""
    out = tmp_path / "ct"
    flags = ["--format", "int4", "--head", "int8", "--asym", "--group-size", "32",
             "--layout", "compressed-tensors"]  # fmt: skip
    assert main(["quantize", "--model", str(tiny_dir), "--out", str(out), *flags]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith(f'wrote {out}: int4 as compressed-tensors (format "pack-quantized", ')
    assert 'num_bits 4, strategy "group", group_size 32, symmetric false), head int8' in line
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and qc["ignore"] == []
    body, head = qc["config_groups"]["group_0"], qc["config_groups"]["group_1"]
    assert (body["targets"], head["targets"]) == (["Linear"], ["lm_head"])
    assert (body["weights"]["num_bits"], head["weights"]["num_bits"]) == (4, 8)
    _, w = load_model(out, dtype=torch.float32)
    assert isinstance(w.layers[1].gate_up_proj, Int4Weight) and isinstance(w.lm_head, Int8Weight)
