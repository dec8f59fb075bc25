"""`evokernel generate` and `evokernel verify`: JSON last lines, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evokernel.cli import main

INTERPRETER_ONLY = "Triton kernels on CPU tensors need the interpreter (CPU-only machines)"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _last_json(out: str) -> dict:
    lines = out.strip().splitlines()
    return json.loads(lines[-1])


def test_generate_prompt_ids_json(capsys, tiny_fp32: Path) -> None:
    code, out, _ = _run(
        capsys, "generate", "--model", str(tiny_fp32), "--prompt-ids", "72,105,33",
        "--max-new-tokens", "5", "--device", "cpu", "--ops", "torch", "--json",
    )  # fmt: skip
    assert code == 0
    record = _last_json(out)
    assert 1 <= len(record["tokens"]) <= 5 and all(isinstance(t, int) for t in record["tokens"])
    for key in ("prefill_ms", "decode_tok_s", "device", "dtype", "text", "stop_reason"):
        assert key in record
    assert record["device"] == "cpu" and record["dtype"] == "float32"
    assert isinstance(record["text"], str)


@pytest.mark.skipif(torch.cuda.is_available(), reason=INTERPRETER_ONLY)
def test_generate_text_prompt_with_sampling(capsys, tiny_fp32: Path) -> None:
    argv = ["generate", "--model", str(tiny_fp32), "--prompt", "Hi there", "--json",
            "--max-new-tokens", "6", "--temperature", "0.9", "--top-k", "20", "--top-p", "0.9",
            "--seed", "3", "--device", "cpu", "--ops", "triton"]  # fmt: skip
    code, out, _ = _run(capsys, *argv)
    assert code == 0
    first = _last_json(out)
    assert first["prompt_len"] == len(b"Hi there")
    assert first["ops"] == "triton"
    _, again, _ = _run(capsys, *argv)
    assert _last_json(again)["tokens"] == first["tokens"]


def test_generate_errors_are_one_line(capsys, tiny_fp32: Path, tiny_no_tokenizer, tmp_path) -> None:
    cases = [
        (["--model", str(tiny_no_tokenizer), "--prompt", "hi"], "needs tokenizer.json"),
        (["--model", str(tiny_fp32), "--prompt-ids", "1,x"], "comma-separated integers"),
        (["--model", str(tiny_fp32), "--prompt-ids", "1,9999"], "outside the vocabulary"),
        (["--model", str(tmp_path / "nothing"), "--prompt-ids", "1"], "no such directory"),
        (["--model", str(tiny_fp32), "--prompt-ids", "1", "--top-p", "0"], "--top-p"),
    ]
    for args, message in cases:
        code, _, err = _run(capsys, "generate", *args, "--device", "cpu", "--ops", "torch")
        assert code == 2, (args, err)
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, err


def test_verify_json_and_exit_codes(capsys, tiny_fp32: Path) -> None:
    base = ["verify", "--model", str(tiny_fp32), "--steps", "4", "--device", "cpu"]
    code, out, _ = _run(capsys, *base, "--ops", "torch", "--json")
    assert code == 0
    record = _last_json(out)
    for key in ("kl_mean", "kl_max", "argmax_agreement", "steps", "device", "dtype"):
        assert key in record
    assert record["passed"] is True and record["threshold"] == 1e-5 and record["steps"] == 4
    code, out, err = _run(capsys, *base, "--ops", "torch", "--threshold", "0", "--json")
    assert code == 1
    assert _last_json(out)["passed"] is False
    assert err.strip().splitlines()[-1].startswith("verify failed: KL mean")


def test_verify_says_why_a_kl_above_the_threshold_passes(capsys, tiny_fp32: Path) -> None:
    """bf16 above the KL threshold but as close to float32 as transformers' own bf16: PASS by
    the fp32_precision rule, and the line says so rather than reading like a failure."""
    argv = ["verify", "--model", str(tiny_fp32), "--steps", "4", "--device", "cpu",
            "--ops", "torch", "--dtype", "bfloat16", "--threshold", "1e-9"]  # fmt: skip
    code, out, _ = _run(capsys, *argv)
    assert code == 0
    assert "PASS (fp32_precision): the KL mean is above the 1e-09 threshold" in out


def test_cli_subprocess_ends_with_json_and_no_traceback(tiny_fp32: Path, tmp_path) -> None:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the CLI sets the Triton mode itself
    cmd = [sys.executable, "-m", "evokernel", "generate", "--model", str(tiny_fp32),
           "--prompt-ids", "1,2,3", "--max-new-tokens", "2", "--device", "cpu",
           "--json"]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tokens" in json.loads(proc.stdout.strip().splitlines()[-1])
    bad = [*cmd[:5], str(tmp_path / "missing"), *cmd[6:]]
    proc = subprocess.run(bad, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ")
