"""`evokernel tasks` and `evokernel eval` refuse bad arguments with one `error:` line and exit 2,
before any candidate runs (a FIFO is never opened)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy
import pytest
from cli_checks import refused

TASK = "gqa_decode_attention"
SEED = Path(__file__).parents[2] / "src/evokernel/tasks/gqa_decode_attention/seed.py"


def test_tasks_refuses_an_empty_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, ["tasks", ""]) == (
        "error: empty task name (omit NAME to list every task)"
    )


def test_eval_refuses_candidates_that_are_not_readable_text_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fifo, binary = tmp_path / "fifo.py", tmp_path / "binary.py"
    os.mkfifo(fifo)
    binary.write_bytes(b"\xff\xfe\x00def attention(): pass\n")
    assert refused(capsys, ["eval", TASK, ""]) == "error: CANDIDATE: empty path"
    assert refused(capsys, ["eval", TASK, str(tmp_path)]) == (
        f"error: CANDIDATE: {tmp_path} is a directory, not a regular file"
    )
    assert refused(capsys, ["eval", TASK, str(fifo)]) == (
        f"error: CANDIDATE: {fifo} is a FIFO, not a regular file"
    )
    assert refused(capsys, ["eval", TASK, str(tmp_path / "none.py")]) == (
        f"error: CANDIDATE: no such file: {tmp_path / 'none.py'}"
    )
    assert refused(capsys, ["eval", TASK, str(binary)]).startswith(
        f"error: cannot read candidate {binary}: 'utf-8' codec can't decode byte 0xff"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--seed", "-1"], "--seed must be in [0, 2**63), got -1"),
        (["--seed", "9" * 25], f"--seed must be in [0, 2**63), got {'9' * 25}"),
        (["--timeout", "inf"], "--timeout must be a finite number, got 'inf'"),
        (["--timeout", "nan"], "--timeout must be a finite number, got 'nan'"),
        (["--timeout", "0"], "--timeout must be > 0, got 0"),
        (["--timeout", "soon"], "--timeout: expected a number, got 'soon'"),
        (["--scenarios", ""], "--scenarios: no names given"),
        (["--scenarios", ","], "--scenarios: item 1 of ',' is empty"),
        (["--scenarios", "b1_ctx16,,b1_ctx64"], "--scenarios: item 2 of 'b1_ctx16,,b1_ctx64'"),
    ],
)
def test_eval_refuses_bad_options(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["eval", TASK, str(SEED), "--device", "cpu", "--no-time", *extra]
    assert refused(capsys, argv).startswith(f"error: {message}")


def test_eval_on_the_cpu_names_the_numpy_the_interpreter_needs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(numpy, "__version__", "2.4.0")
    assert refused(capsys, ["eval", TASK, str(SEED), "--device", "cpu"]) == (
        "error: Triton kernels on the CPU run under Triton's interpreter, which needs "
        "numpy<2.4; numpy 2.4.0 is installed: pip install 'numpy<2.4'"
    )
