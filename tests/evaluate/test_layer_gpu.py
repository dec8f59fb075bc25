"""The decode-layer task on a GPU (run by scripts/gpu_check.sh): graph timing and its attacks.

The seed is the engine's own layer (its fused kernels), so, timed in CUDA graphs of several
layers against the engine's layer, it must come out near 1x: a sanity band for the harness,
not a speed goal. A layer that syncs with the host passes the eager correctness checks but
cannot be captured, and the engine replays its layers from graphs: `graph-capture`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from layer_variants import HOST_SYNC

from evokernel.evaluate import EvalOptions, evaluate
from evokernel.tasks import get_task

pytestmark = pytest.mark.gpu

TASK = "decode_layer"


def _public() -> list[str]:
    return [s.name for s in get_task(TASK).scenarios("cuda")]


@pytest.mark.slow
def test_seed_graph_timed_against_engine_and_torch_layers() -> None:
    names = _public()
    opts = EvalOptions(seed=5, scenarios=(names[0], names[-1]), hidden=True, timeout_s=420)
    result = evaluate(TASK, get_task(TASK).seed_candidate, "cuda", opts)
    assert result.correct, result.reasons
    assert [s.name for s in result.scenarios] == [names[0], names[-1]]
    for s in result.scenarios:
        assert set(s.baselines) == {"engine", "torch"}, s.baselines
        assert s.speedup is not None and 0.7 < s.speedup < 1.4, (s.name, s.speedup)
        assert 0 < s.pct_roofline < 110, (s.name, s.pct_roofline)


def test_host_sync_layer_rejected_at_capture(tmp_path: Path) -> None:
    opts = EvalOptions(
        seed=5, scenarios=(_public()[0],), hidden=False, static_check=False, timeout_s=300
    )
    path = tmp_path / "host_sync.py"
    path.write_text(HOST_SYNC)
    result = evaluate(TASK, path, "cuda", opts)
    assert not result.correct
    assert result.reason_codes == ["graph-capture"], result.reasons
