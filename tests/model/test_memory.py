"""Loading never holds a second copy of the weights in host RAM (peak RSS, in a fresh process)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evokernel.model.random import write_random_checkpoint

# Runs in a child: RSS before loading, peak RSS (VmHWM) after, and the bytes loaded. Mapped
# file pages count in both, so a loader that kept the file resident would show ~2x the weights.
_CHILD = """
import json, sys
from pathlib import Path
import torch
from evokernel.model import safetensors_io
from evokernel.model.loader import load_model

def kb(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

if sys.argv[3] == "keep-pages":
    safetensors_io.TensorMap.release = lambda self, name, rows=None: None
device = sys.argv[2]
if device == "cuda":
    # CUDA's own host memory (context, libraries) is not the loader's: start it first.
    torch.ones(8, dtype=torch.float16).to(device).to(torch.bfloat16)
    torch.cuda.synchronize()
before = kb("VmRSS")
cfg, w = load_model(sys.argv[1], device, torch.bfloat16)
if device == "cuda":
    torch.cuda.synchronize()
print(json.dumps({"before": before, "peak": kb("VmHWM"), "weights": w.nbytes()}))
"""


@pytest.fixture(scope="module")
def layer_heavy_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Qwen3-0.6B layer shapes, 12 layers, small vocab: ~385 MB, largest tensor 6 MB."""
    path = write_random_checkpoint(
        tmp_path_factory.mktemp("heavy"), "qwen3-0.6b", layers=12, vocab=4096, tokenizer=False
    )
    yield path
    shutil.rmtree(path)


def _peak_extra(model_dir: Path, device: str, mode: str) -> tuple[float, int]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(model_dir), device, mode],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return (r["peak"] - r["before"]) / r["weights"], r["weights"]


def test_cpu_load_peaks_near_one_copy(layer_heavy_dir: Path) -> None:
    extra, weights = _peak_extra(layer_heavy_dir, "cpu", "release")
    assert weights > 350e6
    # The destination itself is one copy; anything beyond ~1 tensor more is a second copy.
    assert 0.9 < extra < 1.25, f"peak RSS grew by {extra:.2f}x the weights"


def test_the_check_would_catch_resident_file_pages(layer_heavy_dir: Path) -> None:
    extra, _ = _peak_extra(layer_heavy_dir, "cpu", "keep-pages")
    assert extra > 1.8, f"keeping mapped pages should show ~2x, got {extra:.2f}x"


@pytest.mark.gpu
def test_cuda_load_keeps_host_ram_small(layer_heavy_dir: Path) -> None:
    extra, _ = _peak_extra(layer_heavy_dir, "cuda", "release")
    assert extra < 0.3, f"host peak RSS grew by {extra:.2f}x the weights"
