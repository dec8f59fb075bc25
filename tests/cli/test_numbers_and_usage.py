"""Numeric options refused at parse time (nan, inf, out of range, not a number) before any
work, and argparse's own errors as one line pointing to --help, through the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_checks import refused

from evokernel.cli import main


def test_bench_decode_numbers(
    tiny_fp32: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    base = ["bench", "decode", "--model", str(tiny_fp32), "--device", "cpu", "--out", str(out)]
    cases = [
        (["--steps", "nan"], "--steps: expected an integer, got 'nan'"),
        (["--steps", "1"], "--steps must be >= 2, got 1"),
        (["--steps", "1e3"], "--steps: expected an integer"),
        (["--warmup", "-1"], "--warmup must be >= 0, got -1"),
        (["--power-window-ms", "nan"], "--power-window-ms must be a finite number"),
        (["--power-window-ms", "inf"], "--power-window-ms must be a finite number"),
        (["--power-window-ms", "-5"], "--power-window-ms must be in [0, 60000]"),
        (["--power-window-ms", "1e309"], "--power-window-ms must be a finite number"),
        (["--max-minutes", "nan"], "--max-minutes must be a finite number"),
        (["--max-minutes", "0"], "--max-minutes must be > 0"),
        (["--max-minutes", "-1"], "--max-minutes must be > 0"),
        (["--positions", "0,5"], "--positions must be >= 1, got 0"),
        (["--positions", "1,,5"], "--positions: item 2 of '1,,5' is empty"),
    ]
    for extra, message in cases:
        line = refused(capsys, [*base, *extra])
        assert message in line, (extra, line)
    assert not out.exists()


def test_other_verbs_numbers(tiny_fp32: Path, tmp_path: Path, capsys) -> None:
    model = ["--model", str(tiny_fp32), "--device", "cpu"]
    gen = ["generate", *model, "--prompt-ids", "1,2"]
    cases = [
        ([*gen, "--temperature", "nan"], "--temperature must be a finite number"),
        ([*gen, "--top-p", "inf"], "--top-p must be a finite number"),
        ([*gen, "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        (["verify", *model, "--threshold", "inf"], "--threshold must be a finite number"),
        (["verify", *model, "--steps", "-2"], "--steps must be >= 1"),
        (["tune", *model, "--out", str(tmp_path / "p"), "--budget-minutes", "inf"],
         "--budget-minutes must be a finite number"),
        (["tune", *model, "--out", str(tmp_path / "p"), "--iterations", "1.5"],
         "--iterations: expected an integer"),
    ]  # fmt: skip
    for argv, message in cases:
        assert message in refused(capsys, argv), argv
    assert not (tmp_path / "p").exists()


USAGE_CASES = [
    (["frobnicate"], "evokernel: argument VERB: invalid choice: 'frobnicate'", "evokernel"),
    ([], "evokernel: the following arguments are required: VERB", "evokernel"),
    (["generate", "--model", "m"], "one of the arguments --prompt --prompt-ids is required",
     "evokernel generate"),
    (["generate", "--model", "m", "--prompt", "x", "--bogus"], "unrecognized arguments: --bogus",
     "evokernel"),
    (["bench", "decode", "--device", "tpu"], "argument --device: invalid choice: 'tpu'",
     "evokernel bench decode"),
    (["tune", "--model", "m"], "the following arguments are required: --out", "evokernel tune"),
    (["report"], "the following arguments are required: RUN_DIR | BENCH.json",
     "evokernel report"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message", "prog"), USAGE_CASES)
def test_argparse_errors_are_one_line_with_a_pointer_to_help(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str, prog: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert message in err and err.rstrip().endswith(f"(see {prog} --help)"), err


def test_argparse_error_in_a_fresh_process() -> None:
    cmd = [sys.executable, "-m", "evokernel", "report"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "error: evokernel report: the following arguments are required: RUN_DIR | BENCH.json "
        "(see evokernel report --help)\n"
    )
