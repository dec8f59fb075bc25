"""Random checkpoints for the kernel-pack tests (written once per session, read-only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evokernel.model.random import write_random_checkpoint


@pytest.fixture(scope="session")
def tiny_fp32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `tiny` preset in float32, with a tokenizer."""
    return write_random_checkpoint(tmp_path_factory.mktemp("tiny"), "tiny", seed=0, dtype="float32")


@pytest.fixture(scope="session")
def tiny_wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tiny` with another layer shape (head_dim 64): a pack for `tiny_fp32` does not fit it."""
    return write_random_checkpoint(
        tmp_path_factory.mktemp("wide"), "tiny", seed=1, dtype="float32", head_dim=64
    )
