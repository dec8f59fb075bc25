"""`evokernel model random` and `evokernel model info` on bad input: one `error:` line, exit 2,
nothing half-written; non-finite weights are named."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_checks import copy_with_config, refused, set_value

from evokernel.cli import main
from evokernel.model import random as random_ckpt


@pytest.fixture
def tiny_copy(tiny_fp32: Path, tmp_path: Path) -> Path:
    """A copy of the tiny checkpoint the test may spoil."""
    return copy_with_config(tiny_fp32, tmp_path / "ckpt")


def _random(out: str, *extra: str) -> list[str]:
    return ["model", "random", out, "--preset", "tiny", *extra]


def test_random_refuses_output_paths_it_cannot_create(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    assert refused(capsys, _random("")) == "error: OUT_DIR: empty path"
    assert refused(capsys, _random(str(file / "sub"))) == (
        f"error: OUT_DIR: {file / 'sub'} lies under {file}, which is a regular file, "
        "not a directory"
    )
    assert refused(capsys, _random(str(file))) == (
        f"error: OUT_DIR: {file} exists and is a regular file, not a directory"
    )
    assert "/proc/x" in refused(capsys, _random("/proc/x"))  # /proc takes no new directories


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--seed", "-1"], "--seed must be in [0, 2**63), got -1"),
        (["--seed", "9" * 25], f"--seed must be in [0, 2**63), got {'9' * 25}"),
        (["--seed", "1.5"], "--seed: expected an integer, got '1.5'"),
        (["--layers", "9" * 25], f"--layers must be in [1, 10000], got {'9' * 25}"),
        (["--heads", "0"], "--heads must be >= 1, got 0"),
        (["--vocab", "big"], "--vocab: expected an integer, got 'big'"),
        (
            ["--hidden", "99999999999"],
            "tensor 'model.embed_tokens.weight' [512, 99999999999] takes 1.02e+05 GB; writing "
            "needs two such tensors in RAM",
        ),
    ],
)
def test_random_refuses_bad_numbers_before_writing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str], message: str
) -> None:
    out = tmp_path / "ckpt"
    assert refused(capsys, _random(str(out), *extra)).startswith(f"error: {message}")
    assert not out.exists()


def test_random_refuses_a_checkpoint_larger_than_the_free_disk(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(random_ckpt.shutil, "disk_usage", lambda path: SimpleNamespace(free=1000))
    assert refused(capsys, _random(str(tmp_path / "c"))) == (
        f"error: {tmp_path / 'c'}: the checkpoint takes 0.000312 GB; the disk has 1e-06 GB free"
    )


def test_a_failed_write_is_one_line_and_leaves_no_partial_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[str] = []
    real = random_ckpt._random_tensor

    def fill_the_disk(spec, *args):  # type: ignore[no-untyped-def]
        drawn.append(spec.name)
        if len(drawn) == 4:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(spec, *args)

    monkeypatch.setattr(random_ckpt, "_random_tensor", fill_the_disk)
    out = tmp_path / "c"
    assert refused(capsys, _random(str(out))) == (
        f"error: {out}: cannot write the checkpoint (No space left on device)"
    )
    assert sorted(p.name for p in out.iterdir()) == []
    monkeypatch.setattr(random_ckpt, "_random_tensor", real)
    assert main(_random(str(out))) == 0  # and the directory is usable again


def test_info_names_non_finite_tensors(capsys: pytest.CaptureFixture[str], tiny_copy: Path) -> None:
    weights = tiny_copy / "model.safetensors"
    set_value(weights, "model.layers.0.mlp.up_proj.weight", float("nan"))
    set_value(weights, "model.norm.weight", float("-inf"))
    assert refused(capsys, ["model", "info", str(tiny_copy)]) == (
        f"error: {weights}: tensor 'model.layers.0.mlp.up_proj.weight' holds NaN or Inf "
        "(and 1 more: model.norm.weight)"
    )
    assert main(["model", "info", str(tiny_copy), "--skip-values", "--json"]) == 0
    out = capsys.readouterr().out
    assert "values      not read (--skip-values)" in out
    assert json.loads(out.splitlines()[-1])["values_checked"] is False


def test_info_checks_values_of_sharded_and_untied_checkpoints(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = random_ckpt.write_random_checkpoint(tmp_path / "c", "tiny", shards=3, untied=True)
    assert main(["model", "info", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["values_checked"] is True
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shard = out / index["weight_map"]["lm_head.weight"]
    set_value(shard, "lm_head.weight", float("inf"), index=-1)
    assert refused(capsys, ["model", "info", str(out)]) == (
        f"error: {shard}: tensor 'lm_head.weight' holds NaN or Inf"
    )


def test_info_refuses_paths_that_are_not_directories(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert refused(capsys, ["model", "info", ""]) == "error: DIR: empty path"
    assert refused(capsys, ["model", "info", str(fifo)]) == (
        f"error: DIR: {fifo} is a FIFO, not a directory"
    )


def test_random_under_proc_in_a_fresh_process_is_one_line(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    for out in ("/proc/x", str(file / "sub")):
        cmd = [sys.executable, "-m", "evokernel", "model", "random", out, "--preset", "tiny"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr


def test_info_on_a_config_claiming_a_billion_layers_fails_at_once(
    capsys: pytest.CaptureFixture[str], tiny_fp32: Path, tmp_path: Path
) -> None:
    model = copy_with_config(tiny_fp32, tmp_path / "m", num_hidden_layers=10**9)
    assert refused(capsys, ["model", "info", str(model)]) == (
        f"error: {model / 'model.safetensors'}: missing tensor "
        "'model.layers.2.input_layernorm.weight' (config.json describes 1000000000 layers; "
        "the checkpoint holds 2)"
    )


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _binary(path: Path) -> None:
    path.write_bytes(b"\xff\xfe\x00\x01" * 64)


@pytest.mark.parametrize(
    ("name", "spoil", "message"),
    [
        ("config.json", _fifo, "config.json: not a regular file"),
        ("config.json", _directory, "config.json: not a regular file"),
        ("generation_config.json", _fifo, "generation_config.json: not a regular file"),
        ("model.safetensors", _fifo, "model.safetensors: not a regular file"),
        ("config.json", _binary, "config.json: not valid JSON ('utf-8' codec can't decode"),
        ("generation_config.json", _binary, "generation_config.json: not valid JSON ('utf-8'"),
        ("model.safetensors", _binary, "model.safetensors: corrupt header: header length"),
    ],
)
def test_info_names_checkpoint_files_of_the_wrong_kind(
    capsys: pytest.CaptureFixture[str],
    tiny_copy: Path,
    name: str,
    spoil: Callable[[Path], None],
    message: str,
) -> None:
    spoil(tiny_copy / name)
    line = refused(capsys, ["model", "info", str(tiny_copy)])  # a FIFO would block a reader
    assert line.startswith(f"error: {tiny_copy / name.split('/')[0]}") and message in line


@pytest.mark.parametrize(
    ("spoil", "message"), [(_fifo, "not a regular file"), (_binary, "cannot load tokenizer")]
)
def test_generate_names_a_tokenizer_of_the_wrong_kind(
    capsys: pytest.CaptureFixture[str], tiny_copy: Path, spoil: Callable[[Path], None], message: str
) -> None:
    spoil(tiny_copy / "tokenizer.json")
    argv = ["generate", "--model", str(tiny_copy), "--prompt", "hi", "--device", "cpu"]
    line = refused(capsys, [*argv, "--ops", "torch"])
    assert line.startswith(f"error: {tiny_copy / 'tokenizer.json'}: {message}")
