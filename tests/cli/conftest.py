"""Random checkpoints for the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from evokernel.model.random import write_random_checkpoint


@pytest.fixture(scope="session")
def tiny_fp32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `tiny` preset in float32, with a tokenizer (read-only: copy it to spoil it)."""
    return write_random_checkpoint(tmp_path_factory.mktemp("tiny"), "tiny", seed=0, dtype="float32")
