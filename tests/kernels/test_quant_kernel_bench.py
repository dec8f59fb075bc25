"""The quantized kernel benchmark (bench/quant_kernels.py) builds every format's weights and
ops right; run here on small shapes under the interpreter (its timing needs CUDA)."""

from __future__ import annotations

import pytest
import torch

from evokernel.bench import quant_kernels as qk
from evokernel.model.weights import dense
from evokernel.ops.decode import DEFAULT

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU check of the setup")


@pytest.mark.parametrize("fmt", qk.FORMATS)
@pytest.mark.parametrize("proj", qk.PROJECTIONS)
def test_every_format_and_projection_runs(fmt: str, proj: str) -> None:
    N, K = (2 * 40, 256) if proj == "gate_up" else (40, 256)
    w = qk.make_weight(fmt, N, K, dev="cpu")
    assert tuple(w.shape) == (N, K)
    assert torch.isfinite(dense(w, torch.float32)).all()
    op = qk.make_op(proj, fmt, DEFAULT, 2, N, K, dev="cpu")
    op(w)


def test_projection_shapes_are_the_public_configs() -> None:
    assert qk.projection_shape("qwen3-0.6b", "qkv") == (4096, 1024)
    assert qk.projection_shape("qwen3-8b", "down") == (4096, 12288)
    assert qk.projection_shape("qwen3-4b", "head") == (151936, 2560)
