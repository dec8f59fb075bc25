"""The seeds' kernels compile for an H100 (sm_90) at every corner of their knob space, within
its shared memory (seed_compile.py; `--all` compiles every combination and is part of the GPU
check). Runs in a subprocess: the test process has the interpreter switched on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("seed_compile.py")


def test_seed_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600
    )
    if "ptxas" in proc.stderr and "not found" in proc.stderr.lower():
        pytest.skip("Triton's ptxas is not available on this machine")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("compiled"), proc.stderr[-3000:]
    assert "_combine" in proc.stdout and "_splitk_reduce" in proc.stdout
    assert "decode_layer attention_kernel" in proc.stdout
    assert "decode_layer norm_gate_up_kernel" in proc.stdout
    assert "decode_layer rows_gemv_kernel" in proc.stdout
    assert "decode_layer rows_stream_kernel" in proc.stdout
