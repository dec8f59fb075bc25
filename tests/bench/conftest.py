"""Random checkpoints for the benchmark tests (written once per session, read-only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evokernel.cli import main
from evokernel.model.random import write_random_checkpoint


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `tiny` preset as a user writes it: `evokernel model random --preset tiny` (bf16)."""
    path = tmp_path_factory.mktemp("bench") / "tiny"
    assert main(["model", "random", str(path), "--preset", "tiny"]) == 0
    return path


@pytest.fixture(scope="session")
def gqa3_untied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GQA 6:2, head_dim 64 (q width 384 != hidden 64), untied lm_head, 3 layers, float32."""
    return write_random_checkpoint(
        tmp_path_factory.mktemp("gqa3"), "tiny", seed=3, dtype="float32", heads=6, kv_heads=2,
        head_dim=64, layers=3, untied=True,
    )  # fmt: skip
