"""Shared by the CLI bad-input tests: run a verb in-process and check its refusal, and build
spoiled copies of real checkpoints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file, save_file

from evokernel.cli import main


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the CLI; assert exit 2, nothing on stdout, one `error:` line on stderr (so no
    traceback); return that line."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (argv, out, err)
    assert out == "" and err.startswith("error: ") and err.count("\n") == 1, err
    return err.strip()


def copy_with_config(src: Path, dst: Path, **changes: Any) -> Path:
    """A copy of checkpoint `src` at `dst` with config.json keys changed."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(config | changes))
    return dst


def set_value(weights: Path, name: str, value: float, index: int = 5) -> None:
    """Set one element of tensor `name` in the safetensors file `weights` (rewritten)."""
    tensors = load_file(weights)
    tensors[name].view(-1)[index] = value
    save_file(tensors, str(weights), metadata={"format": "pt"})
