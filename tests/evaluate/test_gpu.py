"""GPU-only attacks and the honest, faster candidate (run by scripts/gpu_check.sh).

Each attack is rejected with its reason; an illegal memory access poisons only its own worker,
so the honest candidate evaluated next still passes, with timings and a speedup interval.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_helpers import HERE, descendants

from evokernel.evaluate import Cascade, EvalOptions, evaluate, evaluate_many
from evokernel.tasks import get_task
from evokernel.tasks.blocks import set_knobs

pytestmark = pytest.mark.gpu

TASK = "gqa_decode_attention"
GPU_HOSTILE = HERE / "hostile_gpu"
QUICK = EvalOptions(
    seed=21, static_check=False, hidden=False, scenarios=("b1_ctx1024",), timeout_s=240
)

# hostile file -> (required reason code, codes allowed besides), shared with the other GPU check
EXPECTED = {
    name: (e["required"], set(e["allowed"]))
    for name, e in json.loads((GPU_HOSTILE / "expected.json").read_text()).items()
    if not name.startswith("_")
}


def split_seed(tmp_path: Path) -> Path:
    """The attention seed with other knobs (longer tiles, deeper pipelining)."""
    source = set_knobs(get_task(TASK).seed_candidate.read_text(), {"BLOCK_N": 128, "NUM_STAGES": 4})
    path = tmp_path / "n128.py"
    path.write_text(source)
    return path


@pytest.fixture(scope="module")
def gpu_batch() -> dict:
    names = sorted(EXPECTED)
    results = evaluate_many(TASK, [GPU_HOSTILE / n for n in names], "cuda", QUICK, workers=2)
    return dict(zip(names, results))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_gpu_attack_rejected(gpu_batch: dict, name: str) -> None:
    required, allowed = EXPECTED[name]
    result = gpu_batch[name]
    assert not result.correct
    assert required in result.reason_codes, result.reasons
    assert set(result.reason_codes) <= allowed, result.reasons


def test_honest_after_illegal_address(tmp_path: Path) -> None:
    # Processes this test did not start (torch.compile's worker pool, from an earlier test in
    # the session) are not the evaluator's to clean up.
    before = set(descendants())
    bad = evaluate(TASK, GPU_HOSTILE / "illegal_address.py", "cuda", QUICK)
    assert "cuda-error" in bad.reason_codes
    good = evaluate(TASK, split_seed(tmp_path), "cuda", QUICK)
    assert good.correct, good.reasons
    assert set(descendants()) <= before


def test_honest_candidate_passes_with_figures() -> None:
    # Figures only: whether the seed beats cuBLAS depends on the GPU (it did on the narrow o
    # projection on an H200, 1.32x; it did not on an H100, 0.71x), so speed is the benchmarks'.
    linear = get_task("decode_linear")
    result = evaluate(linear.name, linear.seed_candidate, "cuda", EvalOptions(seed=22))
    assert result.correct, result.reasons
    assert result.device is not None and result.device.copy_gbps > 100
    names = [s.name for s in result.scenarios]
    assert names == [s.name for s in linear.scenarios("cuda")]
    for s in result.scenarios:
        assert s.speedup is not None and s.speedup_ci is not None
        assert s.speedup_ci[0] <= s.speedup <= s.speedup_ci[1]
        assert 0 < s.pct_roofline <= 105, s
        assert "beyond-roofline" not in s.flags
        # The speedup is against the fastest baseline, and the paired-ratio median agrees with
        # the ratio of the medians (a mixed-up pairing or baseline would break either).
        fastest = min(s.baselines.values(), key=lambda b: b.median_us)
        assert s.baselines[s.baseline].median_us == fastest.median_us, s
        assert 0.75 < s.speedup / (fastest.median_us / s.candidate.median_us) < 1.33, s
    assert "kernels" in result.artifacts and "_linear_tile" in result.artifacts["kernels"]
    assert result.wall_s < 60


def test_the_cascade_screens_below_the_bar_and_times_the_rest_in_full() -> None:
    linear = get_task("decode_linear")
    out_of_reach = EvalOptions(seed=23, hidden=False, cascade=Cascade(promote_above=100.0))
    screened = evaluate(linear.name, linear.seed_candidate, "cuda", out_of_reach)
    assert screened.correct and screened.stage == "screened", screened.reasons
    assert [s.name for s in screened.scenarios] == ["qkv_m1", "o_m1"]  # one per regime
    assert screened.artifacts["cascade"].startswith("estimate "), screened.artifacts
    within = EvalOptions(seed=23, hidden=False, cascade=Cascade(promote_above=0.01))
    promoted = evaluate(linear.name, linear.seed_candidate, "cuda", within)
    assert promoted.correct and promoted.stage == "done", promoted.reasons
    assert [s.name for s in promoted.scenarios] == [s.name for s in linear.scenarios("cuda")]
    assert promoted.artifacts["cascade"].startswith("promoted: estimate ")
