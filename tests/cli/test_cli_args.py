"""The shared flag checks (`evokernel.cli.args`): what each accepts, and the one line each
refusal gives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evokernel.cli import args
from evokernel.errors import ConfigError


def _refused(call, *a, **kw) -> str:
    with pytest.raises(ConfigError) as err:
        call(*a, **kw)
    text = str(err.value)
    assert "\n" not in text
    return text


def test_integers_are_plain_decimals_within_bounds() -> None:
    assert args.integer(" 42 ", "--n") == 42 and args.integer(7, "--n", lo=1) == 7
    assert args.integer("-3", "--n") == -3
    for text in ("1.5", "1e3", "1_000", "0x10", "", "abc", "\u0661"):  # the last: Arabic 1
        assert _refused(args.integer, text, "--n") == f"--n: expected an integer, got {text!r}"
    assert _refused(args.integer, "0", "--n", lo=1) == "--n must be >= 1, got 0"
    assert _refused(args.integer, "11", "--n", lo=1, hi=10) == "--n must be in [1, 10], got 11"
    assert "out of range" in _refused(args.integer, "9" * 5000, "--n", lo=1)


def test_reals_are_finite_within_bounds() -> None:
    assert args.real("0.5", "--p", 0.0, 1.0, lo_open=True) == 0.5
    assert args.real(1.0, "--p", 0.0, 1.0, lo_open=True) == 1.0
    for text in ("nan", "inf", "-inf", "1e999"):
        assert _refused(args.real, text, "--t", lo=0.0).startswith("--t must be a finite number")
    assert _refused(args.real, "x", "--t") == "--t: expected a number, got 'x'"
    assert _refused(args.real, "0", "--p", 0.0, 1.0, lo_open=True) == "--p must be in (0, 1], got 0"
    assert _refused(args.real, "0", "--s", 0.0, lo_open=True) == "--s must be > 0, got 0"
    assert _refused(args.real, "-1", "--t", lo=0.0) == "--t must be >= 0, got -1"


def test_seeds_span_what_every_generator_takes() -> None:
    assert args.seed("0") == 0 and args.seed(str(2**63 - 1)) == 2**63 - 1
    for bad in ("-1", str(2**63), "99999999999999999999999"):
        assert _refused(args.seed, bad) == f"--seed must be in [0, 2**63), got {bad}"


def test_lists_have_no_empty_items() -> None:
    assert args.int_list("1, 2,3", "--ids") == [1, 2, 3]
    assert args.name_list(" a ,b", "--names") == ("a", "b")
    assert _refused(args.int_list, "", "--ids") == "--ids: no values given"
    assert _refused(args.int_list, "1,,2", "--ids") == "--ids: item 2 of '1,,2' is empty"
    assert _refused(args.int_list, "1,2,", "--ids") == "--ids: item 3 of '1,2,' is empty"
    assert _refused(args.int_list, "1,-2", "--ids") == "--ids must be >= 0, got -2"
    assert "comma-separated integers" in _refused(args.int_list, "1,x", "--ids")
    assert _refused(args.name_list, " ", "--names") == "--names: no names given"
    assert _refused(args.name_list, "a,,b", "--names") == "--names: item 2 of 'a,,b' is empty"


def test_input_paths_must_be_what_they_claim(tmp_path: Path) -> None:
    file, fifo = tmp_path / "f.txt", tmp_path / "pipe"
    file.write_text("x")
    os.mkfifo(fifo)
    assert args.regular_file(str(file), "FILE") == file
    assert args.existing_dir(str(tmp_path), "--dir") == tmp_path
    assert _refused(args.regular_file, "", "FILE") == "FILE: empty path"
    assert _refused(args.existing_dir, " ", "--dir") == "--dir: empty path"
    assert _refused(args.regular_file, str(tmp_path), "FILE") == (
        f"FILE: {tmp_path} is a directory, not a regular file"
    )
    assert _refused(args.regular_file, str(fifo), "FILE") == (
        f"FILE: {fifo} is a FIFO, not a regular file"
    )
    assert _refused(args.existing_dir, str(file), "--dir") == (
        f"--dir: {file} is a regular file, not a directory"
    )
    assert _refused(args.existing_dir, str(file / "sub"), "--dir") == (
        f"--dir: no such directory: {file / 'sub'}"
    )
    assert _refused(args.regular_file, str(tmp_path / "none"), "FILE") == (
        f"FILE: no such file: {tmp_path / 'none'}"
    )
    assert _refused(args.regular_file, "/dev/null", "FILE") == (
        "FILE: /dev/null is a device file, not a regular file"
    )


def test_output_dirs_must_be_creatable(tmp_path: Path) -> None:
    file = tmp_path / "f.txt"
    file.write_text("x")
    assert args.output_dir(str(tmp_path / "new" / "deeper"), "--out") == tmp_path / "new/deeper"
    assert args.output_dir(str(tmp_path), "--out") == tmp_path
    assert _refused(args.output_dir, "", "--out") == "--out: empty path"
    assert _refused(args.output_dir, str(file), "--out") == (
        f"--out: {file} exists and is a regular file, not a directory"
    )
    assert _refused(args.output_dir, str(file / "a" / "b"), "--out") == (
        f"--out: {file / 'a' / 'b'} lies under {file}, which is a regular file, not a directory"
    )


def test_a_closed_stdout_pipe_ends_quietly() -> None:
    """`evokernel tasks | head -1` when the reader has gone: exit 141, no traceback."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "evokernel", "tasks"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
