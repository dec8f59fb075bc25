"""Random checkpoints shared by the model tests (written once per session, read-only)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from evokernel.model.random import write_random_checkpoint


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_checkpoint(tmp_path_factory.mktemp("tiny"), preset="tiny", seed=0)


@pytest.fixture(scope="session")
def mid_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Qwen3-0.6B's exact shapes with 3 layers (vocab 151936, 16:8 heads, head_dim 128)."""
    path = write_random_checkpoint(
        tmp_path_factory.mktemp("mid"), preset="qwen3-0.6b", seed=1, layers=3
    )
    yield path
    shutil.rmtree(path)  # 400 MB: do not leave it in pytest's kept temp dirs


@pytest.fixture
def tiny_copy(tmp_path: Path) -> Path:
    """A fresh tiny checkpoint the test may break."""
    return write_random_checkpoint(tmp_path / "ckpt", preset="tiny", seed=0)
