"""`evokernel serve` refuses bad input in one `error:` line before it serves anything: flags,
a missing key variable, a taken port, a checkpoint without a tokenizer, and a KV cache that does
not fit (named with what would)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from evokernel.cli import main
from evokernel.model.random import write_random_checkpoint


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (argv, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--max-len", "99999"], "--max-len must be"),
        (["--max-len", "1"], "--max-len must be"),
        (["--max-batch", "0"], "--max-batch must be"),
        (["--port", "70000"], "--port must be"),
        (["--max-queue", "-1"], "--max-queue must be"),
        (["--shutdown-timeout", "nan"], "--shutdown-timeout"),
        (
            ["--api-key-env", "EVOKERNEL_SURELY_UNSET"],
            "EVOKERNEL_SURELY_UNSET: the variable is not set",
        ),
        (["--chat-template", "/no/such/template.jinja"], "--chat-template"),
    ],
)
def test_bad_flags_are_one_line(capsys, tiny_chat, flags, words):
    assert words in refused(capsys, ["serve", "--model", str(tiny_chat), "--device", "cpu", *flags])


def test_a_taken_port_is_one_line(capsys, tiny_chat):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = refused(
            capsys, ["serve", "--model", str(tiny_chat), "--device", "cpu", "--port", str(port)]
        )
    assert f"cannot listen on 127.0.0.1:{port}" in err


def test_a_checkpoint_without_a_tokenizer_is_refused(capsys, tmp_path):
    ckpt = write_random_checkpoint(tmp_path / "c", "tiny", dtype="float32", tokenizer=False)
    assert "needs the checkpoint's tokenizer.json" in refused(
        capsys, ["serve", "--model", str(ckpt), "--device", "cpu"]
    )


def test_a_kv_cache_that_does_not_fit_stops_start_up_with_what_would(tmp_path):
    # small weights, wide KV: 8 layers x 8 kv heads x 256 x 4 B x 2 = 128 KiB per position
    ckpt = write_random_checkpoint(
        tmp_path / "wide", "tiny", dtype="float32", layers=8, heads=8, kv_heads=8, head_dim=256
    )
    cmd = [sys.executable, "-m", "evokernel", "serve", "--model", str(ckpt), "--device", "cpu",
           "--port", "0", "--max-batch", "1024", "--max-len", "4096"]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the KV cache for --max-batch 1024"), (
        lines
    )
    assert "at most" in lines[0] and run.stdout == ""
