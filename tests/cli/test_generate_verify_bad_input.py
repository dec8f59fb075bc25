"""`evokernel generate` and `evokernel verify` refuse bad input up front, each with one
`error:` line and exit 2, before loading anything the check does not need."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
from cli_checks import copy_with_config, refused, set_value

from evokernel.cli import main
from evokernel.engine import verify as verify_module
from evokernel.model.random import write_random_checkpoint

CPU = ("--device", "cpu", "--ops", "torch")


@pytest.fixture(scope="module")
def short_context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with 32 positions (max_position_embeddings)."""
    return write_random_checkpoint(
        tmp_path_factory.mktemp("short"), "tiny", dtype="float32", max_position_embeddings=32
    )


@pytest.fixture
def no_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if verify gets as far as loading transformers."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("transformers was loaded before the arguments were checked")

    monkeypatch.setattr(verify_module, "load_reference", refuse)


def _gen(model: Path, *extra: str) -> list[str]:
    return ["generate", "--model", str(model), "--prompt-ids", "1,2", *CPU, *extra]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--seed", "99999999999999999999999"], "--seed must be in [0, 2**63), got 9999"),
        (["--seed", "-1"], "--seed must be in [0, 2**63), got -1"),
        (["--temperature", "inf"], "--temperature must be a finite number, got 'inf'"),
        (["--temperature", "nan"], "--temperature must be a finite number, got 'nan'"),
        (["--temperature", "-0.5"], "--temperature must be >= 0, got -0.5"),
        (["--temperature", "1e-9"], "--temperature must be 0 (greedy) or a finite value >= 1e-05"),
        (["--top-p", "0"], "--top-p must be in (0, 1], got 0"),
        (["--top-p", "1.01"], "--top-p must be in (0, 1], got 1.01"),
        (["--top-p", "nan"], "--top-p must be a finite number, got 'nan'"),
        (["--top-k", "-1"], "--top-k must be >= 0, got -1"),
        (["--top-k", "513"], "--top-k must be <= the vocabulary size 512, got 513"),
        (["--top-k", "1" + "0" * 30], "--top-k must be <= the vocabulary size 512"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
        (["--max-new-tokens", "two"], "--max-new-tokens: expected an integer, got 'two'"),
        (
            ["--max-new-tokens", "9" * 30],
            f"--max-new-tokens {'9' * 30}: the 2-token prompt + {'9' * 30} exceeds the model's "
            "4096 positions",
        ),
    ],
)
def test_generate_refuses_bad_numbers(
    capsys: pytest.CaptureFixture[str], tiny_fp32: Path, extra: list[str], message: str
) -> None:
    assert refused(capsys, _gen(tiny_fp32, *extra)).startswith(f"error: {message}")


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ("", "--prompt-ids: no values given"),
        ("1,,2", "--prompt-ids: item 2 of '1,,2' is empty"),
        ("1,2,", "--prompt-ids: item 3 of '1,2,' is empty"),
        ("1,-2", "--prompt-ids must be >= 0, got -2"),
        ("1,2.5", "--prompt-ids: expected comma-separated integers, got '2.5'"),
        ("1,99999999999999999999", "prompt token id 99999999999999999999 is outside the vocab"),
    ],
)
def test_generate_refuses_malformed_prompt_ids(
    capsys: pytest.CaptureFixture[str], tiny_fp32: Path, ids: str, message: str
) -> None:
    argv = ["generate", "--model", str(tiny_fp32), "--prompt-ids", ids, *CPU]
    assert refused(capsys, argv).startswith(f"error: {message}")


def test_generate_refuses_a_model_path_that_is_not_a_directory(
    capsys: pytest.CaptureFixture[str], tiny_fp32: Path, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    config = tiny_fp32 / "config.json"
    cases = [
        ("", "error: --model: empty path"),
        (str(fifo), f"error: --model: {fifo} is a FIFO, not a directory"),
        (str(config), f"error: --model: {config} is a regular file, not a directory"),
        (str(config / "sub"), f"error: --model: no such directory: {config / 'sub'}"),
    ]
    for model, message in cases:
        argv = ["generate", "--model", model, "--prompt-ids", "1", *CPU]
        assert refused(capsys, argv) == message


def test_verify_checks_steps_against_positions_before_any_reference_runs(
    capsys: pytest.CaptureFixture[str], short_context: Path, no_reference: None
) -> None:
    base = ["verify", "--model", str(short_context), *CPU]
    assert refused(capsys, [*base, "--steps", "40"]) == (
        "error: --steps 40: the 16-token prompt + 40 exceeds the model's 32 positions"
    )
    assert refused(capsys, [*base, "--steps", "100000000"]) == (
        "error: --steps 100000000: the 16-token prompt + 100000000 exceeds the model's 32 positions"
    )
    assert refused(capsys, [*base, "--steps", "30", "--prompt-ids", "1,2,3"]) == (
        "error: --steps 30: the 3-token prompt + 30 exceeds the model's 32 positions"
    )
    assert refused(capsys, [*base, "--steps", "0"]) == "error: --steps must be >= 1, got 0"
    assert refused(capsys, [*base, "--prompt-ids", ""]) == "error: --prompt-ids: no values given"
    assert refused(capsys, [*base, "--threshold", "nan"]) == (
        "error: --threshold must be a finite number, got 'nan'"
    )
    assert refused(capsys, [*base, "--threshold", "-1"]) == (
        "error: --threshold must be >= 0, got -1"
    )


def test_verify_runs_right_up_to_the_last_position(
    capsys: pytest.CaptureFixture[str], short_context: Path
) -> None:
    argv = ["verify", "--model", str(short_context), *CPU, "--steps", "16", "--json"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["steps"] == 16 and record["prompt_len"] == 16 and record["passed"]


def test_generate_refuses_non_finite_weights(
    capsys: pytest.CaptureFixture[str], tiny_fp32: Path, tmp_path: Path
) -> None:
    up = "model.layers.1.mlp.up_proj.weight"
    bad = copy_with_config(tiny_fp32, tmp_path / "nan")
    set_value(bad / "model.safetensors", up, float("nan"))
    assert refused(capsys, _gen(bad)) == (
        f"error: {bad / 'model.safetensors'}: tensor {up!r} holds NaN or Inf"
    )


@pytest.mark.gpu
def test_the_finite_check_runs_on_the_gpu(
    capsys: pytest.CaptureFixture[str], tiny_fp32: Path, tmp_path: Path
) -> None:
    up, norm = "model.layers.1.mlp.up_proj.weight", "model.norm.weight"
    bad = copy_with_config(tiny_fp32, tmp_path / "inf")
    set_value(bad / "model.safetensors", up, float("inf"))
    set_value(bad / "model.safetensors", norm, float("nan"))
    argv = ["generate", "--model", str(bad), "--prompt-ids", "1,2", "--device", "cuda"]
    where = bad / "model.safetensors"
    assert refused(capsys, argv) == (
        f"error: {where}: tensor {up!r} holds NaN or Inf (and 1 more: {norm})"
    )
    big = copy_with_config(tiny_fp32, tmp_path / "big")
    set_value(big / "model.safetensors", norm, 1e6)
    where = big / "model.safetensors"
    assert refused(capsys, [*argv[:2], str(big), *argv[3:], "--dtype", "float16"]) == (
        f"error: {where}: tensor {norm!r} overflows float16 (finite in the file)"
    )


def test_generate_refuses_weights_that_overflow_the_load_dtype(
    capsys: pytest.CaptureFixture[str], tiny_fp32: Path, tmp_path: Path
) -> None:
    norm = "model.norm.weight"
    big = copy_with_config(tiny_fp32, tmp_path / "big")
    set_value(big / "model.safetensors", norm, 1e6)  # finite in float32, inf in float16
    where = big / "model.safetensors"
    assert refused(capsys, _gen(big, "--dtype", "float16")) == (
        f"error: {where}: tensor {norm!r} overflows float16 (finite in the file)"
    )


def test_generate_drops_hub_token_ids_outside_a_small_vocabulary(
    capsys: pytest.CaptureFixture[str], tiny_fp32: Path, tmp_path: Path
) -> None:
    # Qwen3-0.6B's ids (vocabulary 151936)
    model = copy_with_config(tiny_fp32, tmp_path / "hub", bos_token_id=151643, eos_token_id=151645)
    assert main(_gen(model, "--max-new-tokens", "3", "--json")) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out.strip().splitlines()[-1])["tokens"]) == 3
    assert err.splitlines() == [
        f"warning: {model}: token ids outside the vocabulary [0, 512) ignored: "
        "config.json eos_token_id 151645; config.json bos_token_id 151643"
    ]


def test_verify_checks_a_hub_config_on_a_small_vocabulary(
    capsys: pytest.CaptureFixture[str], tiny_fp32: Path, tmp_path: Path
) -> None:
    """Qwen3's bos/eos/pad ids on a 512-token vocabulary: transformers' embedding would refuse
    the pad id; both sides drop the ids, and one warning says so."""
    ids = {"bos_token_id": 151643, "eos_token_id": 151645, "pad_token_id": 151643}
    model = copy_with_config(tiny_fp32, tmp_path / "hub", **ids)
    argv = ["verify", "--model", str(model), *CPU, "--steps", "3", "--json"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out.strip().splitlines()[-1])["passed"] is True
    assert err.splitlines() == [
        f"warning: {model}: token ids outside the vocabulary [0, 512) ignored: "
        "config.json eos_token_id 151645; config.json bos_token_id 151643"
    ]


def test_verify_reports_a_config_transformers_refuses_in_one_line(
    capsys: pytest.CaptureFixture[str], tiny_fp32: Path, tmp_path: Path
) -> None:
    model = copy_with_config(tiny_fp32, tmp_path / "strict", use_cache="yes")
    line = refused(capsys, ["verify", "--model", str(model), *CPU, "--steps", "2"])
    assert line.startswith(f"error: transformers cannot load {model}: ")
    assert "use_cache" in line


def test_triton_on_the_cpu_names_the_numpy_it_needs(
    capsys: pytest.CaptureFixture[str], tiny_fp32: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(numpy, "__version__", "2.4.1")
    message = (
        "error: Triton kernels on the CPU run under Triton's interpreter, which needs "
        "numpy<2.4; numpy 2.4.1 is installed: pip install 'numpy<2.4', or use --ops torch"
    )
    for verb in (_gen(tiny_fp32), ["verify", "--model", str(tiny_fp32), *CPU]):
        argv = [*verb[:-1], "triton"]  # --ops triton
        assert refused(capsys, argv) == message
    monkeypatch.setattr(numpy, "__version__", "2.3.5")
    assert main(_gen(tiny_fp32, "--max-new-tokens", "1")) == 0  # torch ops never need it


def test_bad_input_in_a_fresh_process_is_one_line(tiny_fp32: Path) -> None:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    cmd = [sys.executable, "-m", "evokernel", "generate", "--model", str(tiny_fp32), *CPU]
    for extra in (["--prompt-ids", ""], ["--prompt-ids", "1", "--seed", "9" * 25]):
        proc = subprocess.run([*cmd, *extra], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
