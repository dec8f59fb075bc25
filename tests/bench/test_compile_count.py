"""The compiled baselines compile their decode step once for every cache length of a run,
including a cache exactly as long as head_dim (128 on Qwen3-0.6B, the first length a run uses)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evokernel.bench.stepping import CellPlan, measure_cell, prompt_ids
from evokernel.bench.systems.gptfast import GptFastSystem
from evokernel.bench.systems.hf import HfCompileSystem
from evokernel.model.random import write_random_checkpoint


@pytest.fixture(scope="module")
def head_dim_128(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_checkpoint(
        tmp_path_factory.mktemp("hd128"), "tiny", seed=1, dtype="float32", head_dim=128
    )


@pytest.mark.parametrize("system_cls", [GptFastSystem, HfCompileSystem])
def test_one_compile_serves_every_cache_length(head_dim_128: Path, system_cls) -> None:
    system = system_cls(head_dim_128, "cpu", torch.float32)
    try:
        lengths = []
        for position in (1, 128):
            plan = CellPlan(position, steps=3, warmup=2, power_window_ms=0)
            row, cache_len = measure_cell(system, prompt_ids(512, position), plan, 1.0, None, "cpu")
            assert row.error is None, row.error
            lengths.append(cache_len)
        assert lengths == [128, 256]
        assert system.setup()["graphs_compiled"] == 1
    finally:
        system.close()
