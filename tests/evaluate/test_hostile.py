"""Every hostile candidate is rejected with the right reason, by the dynamic defences alone
(static check off) and, where the static check applies, by it too. Nothing a candidate starts
outlives its evaluation.

All hostile files run in one `evaluate_many` batch (two workers) on the CPU under the Triton
interpreter; the GPU-only attacks live in test_gpu.py.
"""

from __future__ import annotations

import pytest
from eval_helpers import HOSTILE, descendants, marked_copy, marked_processes

from evokernel.evaluate import EvalOptions, evaluate, evaluate_many
from evokernel.evaluate.static import check_source

TASK = "gqa_decode_attention"

# file -> (reason codes allowed with the static check off, with it on; None: it passes the
# static check, so the dynamic outcome above holds with the check on too)
EXPECTED: dict[str, tuple[set[str], set[str] | None]] = {
    "returns_input.py": ({"mismatch"}, None),
    "returns_empty.py": ({"not-finite"}, None),
    "returns_zeros.py": ({"mismatch"}, None),
    "writes_nothing.py": ({"not-finite"}, None),
    "mutates_inputs.py": ({"input-mutated"}, None),
    "ignores_seq_lens.py": ({"not-finite", "mismatch"}, None),
    "wrong_gqa_mapping.py": ({"mismatch"}, None),
    "tile_aligned_only.py": ({"mismatch", "not-finite"}, None),
    "low_precision.py": ({"mismatch"}, None),
    "raises.py": ({"exception"}, None),
    "surrogate_message.py": ({"exception"}, None),
    "wrong_shape.py": ({"output-shape"}, None),
    "wrong_dtype.py": ({"output-dtype"}, None),
    "tensor_subclass.py": ({"output-type"}, None),
    "nondeterministic.py": ({"nondeterministic"}, None),
    "cache_by_pointer.py": ({"mismatch"}, None),
    "hides_work_in_thread.py": ({"thread"}, {"static"}),
    "patches_allclose.py": ({"patched"}, {"static"}),
    "patches_timer.py": ({"patched"}, {"static"}),
    "fake_result_exit.py": ({"no-result"}, {"static"}),
    "hangs.py": ({"timeout"}, {"static"}),
    "daemon_grandchild.py": ({"process"}, {"static"}),
    "segfaults.py": ({"crashed"}, {"static"}),
    "hogs_memory.py": ({"memory-budget"}, None),
    "import_error.py": ({"load"}, None),
    "no_entry_point.py": ({"load"}, None),
    "forges_a_reply.py": ({"no-result"}, None),
    "floods_the_channel.py": ({"no-result"}, None),
}
# Codes that may follow the expected one: the nondeterministic candidate's noisy calls also
# miss the reference when they happen to be the first call on an input set; the pointer cache
# answers a later job in another dtype from its cache when that job's buffers happen to land
# at a cached address.
LATER = {"nondeterministic.py": {"mismatch"}, "cache_by_pointer.py": {"output-dtype"}}
STATIC_ONLY = {"forbidden_constructs.py", "no_markers.py"}
MARKED = {"hangs.py", "daemon_grandchild.py"}
TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory):
    names = sorted(EXPECTED, key=lambda n: n != "hangs.py")  # the slow one first
    options = EvalOptions(
        static_check=False, time=False, seed=11, timeout_s=TIMEOUT_S, memory_mb=3072
    )
    marked = tmp_path_factory.mktemp("marked")
    files, tokens = [], []
    for name in names:
        if name in MARKED:  # its long-lived process carries a unique name we can look for
            path, token = marked_copy(HOSTILE / name, marked)
            files.append(path)
            tokens.append(token)
        else:
            files.append(HOSTILE / name)
    results = evaluate_many(TASK, files, "cpu", options, workers=2)
    return dict(zip(names, results)), tokens


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rejected_by_dynamic_checks(batch, name: str) -> None:
    results, _ = batch
    result = results[name]
    allowed = EXPECTED[name][0]
    assert not result.correct, f"{name} passed"
    assert result.reasons
    assert result.reason_codes[0] in allowed, (name, result.reasons)
    assert set(result.reason_codes) <= allowed | LATER.get(name, set()), (name, result.reasons)


@pytest.mark.parametrize(
    "name", sorted(n for n, (_, s) in EXPECTED.items() if s) + sorted(STATIC_ONLY)
)
def test_rejected_by_static_check(name: str) -> None:
    result = evaluate(TASK, HOSTILE / name, device="cpu", options=EvalOptions(seed=1))
    assert result.stage == "static"
    assert set(result.reason_codes) == {"static"}, result.reasons
    assert result.wall_s < 2.0  # no process was started


@pytest.mark.parametrize("name", sorted(n for n, (_, s) in EXPECTED.items() if s is None))
def test_dynamic_only_attacks_pass_the_static_check(name: str) -> None:
    assert check_source((HOSTILE / name).read_text()) == []


def test_static_check_names_each_construct() -> None:
    lines = check_source((HOSTILE / "forbidden_constructs.py").read_text())
    text = "\n".join(lines)
    for needle in ("torch.cuda.Stream", "__class__", "'eval'", "'getattr'", "torch.backends"):
        assert needle in text, text
    assert all(line.startswith("static: line ") for line in lines)


def test_reasons_say_where(batch) -> None:
    results, _ = batch
    hidden = results["tile_aligned_only.py"]
    assert any("hidden scenario" in r for r in hidden.reasons), hidden.reasons
    assert not any("hidden_" in r for r in hidden.reasons)  # hidden shapes stay out of reasons
    crash = results["segfaults.py"]
    assert "SIGSEGV" in crash.reasons[0]
    forged = results["forges_a_reply.py"]
    assert "protocol broken" in forged.reasons[0] and "must be a list" in forged.reasons[0]
    flood = results["floods_the_channel.py"]
    assert "protocol broken" in flood.reasons[0] and "in all" in flood.reasons[0], flood.reasons
    fake = results["fake_result_exit.py"]
    assert '"correct": true' in fake.artifacts["stdout_tail"]  # printed, captured, ignored
    pointer = results["cache_by_pointer.py"]
    assert any("after perturb" in r for r in pointer.reasons), pointer.reasons
    text = results["surrogate_message.py"]
    assert "? no text can hold this ?" in text.reasons[0]
    "\n".join(text.reasons).encode("utf-8")  # printable and storable: it raised before


def test_nothing_outlives_the_batch(batch) -> None:
    results, tokens = batch
    assert "process" in results["daemon_grandchild.py"].reason_codes  # the daemon did run
    for token in tokens:
        assert marked_processes(token) == [], f"a process named {token} outlived its evaluation"
    assert descendants() == [], "a worker or its child is still running"
