"""The quantized decode kernels build for an H100 (sm_90) as ops/quant.py launches them at
Qwen3-0.6B's shapes, every format and projection, act-order and bias too, and keep their
tiles in registers (quant_compile.py; Triton's own ptxas, no GPU needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("quant_compile.py")


def test_quantized_kernels_build_for_sm90_without_spills() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "qwen3-0.6b"], env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    if "ptxas" in proc.stderr and "not found" in proc.stderr.lower():
        pytest.skip("Triton's ptxas is not available on this machine")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("LOCAL:0") == 21, proc.stdout
