"""The decode-layer task through the evaluator on the CPU: its seed passes a full `eval`
(correctness on every public and hidden scenario in float32 and float16, the timing path with
both baselines), an honest torch-ops layer passes, and each attack a layer candidate can newly
make is rejected with the right reason: skipping the layer's work, writing the token's K/V row
at the wrong position or besides the right one, not writing it, writing K without its norm and
RoPE, and answering from a cache keyed on the inputs' addresses.

The writes are in-place outputs (`Task.writes`): the worker judges `Task.observe`'s layout
[h_out | K rows | V rows] and reports a write outside the token's rows as `cache-write`. All
candidates are torch-only (the static check passes them: the defences are dynamic): the honest
layer in layer_hostile/ and variants of it made here by replacing one of its hooks or its
entry's call (layer_variants.py), evaluated in one `evaluate_many` batch with two workers.
"""

from __future__ import annotations

import pytest
from eval_helpers import HERE, descendants
from layer_variants import HOST_SYNC, layer_variant

from evokernel.evaluate import EvalOptions, evaluate, evaluate_many
from evokernel.evaluate.static import check_source
from evokernel.tasks import get_task

TASK = "decode_layer"
FILES = HERE / "layer_hostile"
HONEST = "honest_torch_layer.py"

WRITE = """def _write(k_cache, v_cache, rows, pos, k, v, raw_k):
    k_cache[rows, :, pos] = k
    v_cache[rows, :, pos] = v
"""
RESULT = """def _result(h, out):
    return out
"""

CACHED = (
    RESULT
    + """
CACHE = {}


def _cached(*args):
    # Addresses alone can recur across the evaluator's input sets (freed and reused storage):
    # a weight value keeps one set's answer from another's, so only the perturbed call (new h
    # in the same storage) gets a stale answer.
    h, qkv_proj, positions, k_cache, v_cache = (args[i] for i in (0, 2, 12, 13, 14))
    key = (h.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), tuple(h.shape), h.dtype,
           float(qkv_proj.reshape(-1)[0]))
    rows = torch.arange(h.shape[0], device=h.device)
    pos = positions.long()
    if key not in CACHE:
        out = _layer(*args)
        CACHE[key] = (out.clone(), k_cache[rows, :, pos].clone(), v_cache[rows, :, pos].clone())
    out, k_rows, v_rows = CACHE[key]
    k_cache[rows, :, pos] = k_rows
    v_cache[rows, :, pos] = v_rows
    return out.clone()
"""
)

# Attacks made from the honest layer by replacing its `_write` or `_result` (the hooks it keeps
# for this), or its entry's call: file -> (what it does, {honest text: attack text}).
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "returns_h.py": (
        "writes the cache rows but skips the rest of the layer: returns h unchanged",
        {RESULT: RESULT.replace("return out", "return h.clone()")},
    ),
    "returns_h_plus_constant.py": (
        "writes the cache rows and returns h plus a constant instead of h + attention + MLP",
        {RESULT: RESULT.replace("return out", "return h + 0.05")},
    ),
    "no_cache_write.py": (
        "attends with the token's K and V but never writes them to the cache",
        {WRITE: WRITE.split("\n")[0] + "\n    pass\n"},
    ),
    "writes_raw_k.py": (
        "writes K as projected, without its RMSNorm and RoPE",
        {"k_cache[rows, :, pos] = k\n": "k_cache[rows, :, pos] = raw_k\n"},
    ),
    "writes_next_row.py": (
        "writes the token's K and V one row late (positions + 1, an off-by-one)",
        {WRITE: WRITE.replace("pos] =", "(pos + 1).clamp(max=k_cache.shape[2] - 1)] =")},
    ),
    "writes_row_zero.py": (
        "writes the token's K and V at position 0 of every sequence",
        {WRITE: WRITE.replace("pos] =", "0] =")},
    ),
    "writes_extra_row.py": (
        "writes the right rows, and the token's K and V over the previous token's rows too",
        {WRITE: WRITE + WRITE.split("\n", 1)[1].replace("pos] =", "(pos - 1).clamp(min=0)] =")},
    ),
    "cache_by_pointer.py": (
        "caches its answer on the inputs' addresses (h, the caches): a call with the same "
        "buffers gets the cached residual stream, and the cached K/V rows written again; right "
        "for repeated calls on the same inputs, stale after perturb (new h, same storage)",
        {RESULT: CACHED, "    return _layer(\n": "    return _cached(\n"},
    ),
}

# file -> reason codes allowed (the first one must be among them)
EXPECTED: dict[str, set[str]] = {
    "returns_h.py": {"mismatch"},
    "returns_h_plus_constant.py": {"mismatch"},
    "writes_next_row.py": {"cache-write"},
    "writes_row_zero.py": {"cache-write"},
    "writes_extra_row.py": {"cache-write"},
    "no_cache_write.py": {"mismatch"},
    "writes_raw_k.py": {"mismatch"},
    "cache_by_pointer.py": {"mismatch"},
}


def attack_source(name: str) -> str:
    """The source of candidate `name`: the honest layer itself, or a variant of it."""
    if name not in VARIANTS:
        return (FILES / name).read_text()
    what, edits = VARIANTS[name]
    return layer_variant(what, sorted(EXPECTED[name])[0], edits)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    names = [*sorted(EXPECTED), HONEST]
    here = tmp_path_factory.mktemp("layer_hostile")
    for name in names:
        (here / name).write_text(attack_source(name))
    options = EvalOptions(static_check=False, time=False, seed=11, timeout_s=60.0)
    results = evaluate_many(TASK, [here / n for n in names], "cpu", options, workers=2)
    return dict(zip(names, results))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rejected(batch, name: str) -> None:
    result = batch[name]
    allowed = EXPECTED[name]
    assert not result.correct, f"{name} passed"
    assert result.stage == "correctness"
    assert result.reason_codes[0] in allowed, (name, result.reasons)
    assert set(result.reason_codes) <= allowed, (name, result.reasons)


def test_reasons_say_what_was_wrong(batch) -> None:
    late = batch["writes_next_row.py"].reasons[0]
    assert "k_cache" in late and "offset +1 from its token's row" in late, late
    extra = batch["writes_extra_row.py"].reasons[0]
    assert "offset -1 from its token's row" in extra, extra
    assert any("row 0" in r for r in batch["writes_row_zero.py"].reasons)
    pointer = batch["cache_by_pointer.py"].reasons
    assert all("after perturb" in r for r in pointer), pointer  # repeated calls were right


def test_honest_torch_layer_passes(batch) -> None:
    result = batch[HONEST]
    assert result.correct, result.reasons
    assert any(c.hidden for c in result.checks)
    assert {c.dtype for c in result.checks} == {"float32", "float16"}
    assert descendants() == []


def test_the_gpu_suites_host_sync_layer_is_correct_in_eager_calls(tmp_path) -> None:
    """Its GPU test expects `graph-capture` after correctness: that premise, on the CPU."""
    path = tmp_path / "host_sync.py"
    path.write_text(HOST_SYNC)
    options = EvalOptions(static_check=False, time=False, hidden=False, seed=11, timeout_s=60.0)
    result = evaluate(TASK, path, "cpu", options)
    assert result.correct, result.reasons


@pytest.mark.parametrize("name", [*sorted(EXPECTED), HONEST])
def test_attacks_pass_the_static_check(name: str) -> None:
    assert check_source(attack_source(name)) == []


@pytest.mark.slow
def test_seed_passes_a_full_cpu_eval() -> None:
    task = get_task(TASK)
    result = evaluate(TASK, task.seed_candidate, "cpu", EvalOptions(seed=5))
    assert result.correct, result.reasons
    assert result.stage == "done"
    assert all(c.passed for c in result.checks)
    assert any(c.hidden for c in result.checks)
    assert {c.dtype for c in result.checks} == {"float32", "float16"}
    assert result.timing_label.startswith("cpu-interpreter")
    assert [s.name for s in result.scenarios] == [s.name for s in task.scenarios("cpu")]
    for s in result.scenarios:
        assert set(s.baselines) == {"engine", "torch"}
        assert s.speedup is None and not s.win  # the interpreter makes no speed claim
    assert descendants() == []
