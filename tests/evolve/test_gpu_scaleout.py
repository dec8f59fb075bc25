"""On a machine with two or more GPUs: a real search's evaluations land on every GPU, each
evaluation timed on the GPU its worker asked for (GPU check only)."""

from __future__ import annotations

import io

import pytest

pytestmark = pytest.mark.gpu


def test_a_local_search_uses_every_gpu(tmp_path):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    from evokernel.evolve import KernelProblem, config_from_dict, run_search
    from evokernel.evolve.database import Database

    gpus = torch.cuda.device_count()
    cfg = config_from_dict(
        {
            "in_flight": gpus,
            "islands": {"count": 2},
            "evaluator": {"workers": gpus, "reps": 5, "profile": False},
            "budget": {"iterations": 2 * gpus},
            "checkpoint": {"write_sources": False},
        }
    )
    out = run_search(
        KernelProblem("decode_linear", "cuda", cfg), cfg, tmp_path / "run", stream=io.StringIO()
    )
    assert out.summary.iterations_done == 2 * gpus
    db = Database(tmp_path / "run" / "programs.sqlite", readonly=True)
    try:
        used = {p.evaluated_on["gpu"] for p in db.programs if p.evaluated_here}
    finally:
        db.close()
    assert used == set(range(gpus))
