"""`evokernel bench decode` on CUDA: every system runs, the compiled ones compile once under
Inductor with CUDA graphs, and the figures are consistent (Qwen3-0.6B shapes, 2 layers)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from evokernel.bench.results import validate
from evokernel.cli import main
from evokernel.model.random import write_random_checkpoint

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.fixture(scope="module")
def two_layers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = write_random_checkpoint(
        tmp_path_factory.mktemp("q06b2"), preset="qwen3-0.6b", seed=0, layers=2
    )
    yield path
    shutil.rmtree(path)


def test_every_system_runs_and_compiles_once_on_cuda(two_layers: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    argv = ["bench", "decode", "--model", str(two_layers), "--device", "cuda", "--positions",
            "1,300", "--steps", "16", "--power-window-ms", "200", "--out", str(out),
            "--baselines", "evokernel,gptfast,hf_eager,hf_compile"]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert validate(doc) == []
    assert [r["error"] for r in doc["results"]] == [None] * 8, doc["results"]
    assert doc["env"]["gpu"] and doc["env"]["copy_gbps"] > 100
    setup = doc["options"]["setup"]
    assert setup["gptfast"]["graphs_compiled"] == 1
    assert setup["hf_compile"]["graphs_compiled"] == 1
    assert doc["options"]["cache_len"]["gptfast"] == {"1": 128, "300": 384}
    for r in doc["results"]:
        assert 0 < r["pct_floor"] < 100, r  # nothing beats the copy bandwidth
        assert 0.5 < r["ms_host_mean"] / r["ms_mean"] < 2, r  # events and host clock agree
