"""`evokernel bench eval` refuses bad arguments with one `error:` line and exit 2, before any
evaluation starts."""

from __future__ import annotations

import pytest
from cli_checks import refused


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--programs", "0"], "error: --programs must be >= 1, got 0"),
        (["--tasks", "nope"], "error: unknown task 'nope'"),
        (["--tasks", "a,,b"], "error: --tasks: item 2 of 'a,,b' is empty"),
        (["--promote-above", "nan"], "error: --promote-above must be a finite number, got 'nan'"),
        (["--max-minutes", "-1"], "error: --max-minutes must be >= 0, got -1"),
        (["--workers", "x"], "error: --workers: expected an integer, got 'x'"),
        (["--out", "x.txt"], "error: --out must name a .json file, got x.txt"),
    ],
)
def test_bench_eval_refuses_bad_arguments(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert refused(capsys, ["bench", "eval", "--device", "cpu", *extra]).startswith(message)
