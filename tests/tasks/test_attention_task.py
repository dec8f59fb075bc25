"""`gqa_decode_attention`: inputs, junk, reference, baselines, roofline, and that trivial or
mask-ignoring candidates fail."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from task_checks import digest, passes

from evokernel.tasks import get_task
from evokernel.tasks.base import Scenario

TASK = get_task("gqa_decode_attention")
CPU = TASK.scenarios("cpu") + TASK.hidden_scenarios("cpu", 0) + TASK.hidden_scenarios("cpu", 1)


def _by_name(name: str) -> Scenario:
    return next(s for s in TASK.scenarios("cpu") if s.name == name)


def test_inputs_are_a_function_of_scenario_seed_and_dtype():
    s = _by_name("b3_ctx200")
    a = TASK.make_inputs(s, 5, torch.float32)
    assert digest(a) == digest(TASK.make_inputs(s, 5, torch.float32))
    assert digest(a) != digest(TASK.make_inputs(s, 6, torch.float32))
    half = TASK.make_inputs(s, 5, torch.float16)
    assert half["q"].dtype == half["k_cache"].dtype == torch.float16
    assert half["seq_lens"].dtype == torch.int32
    assert a["scale"] == 128**-0.5


def test_a_fresh_process_builds_the_same_bits():
    s = _by_name("b1_ctx64")
    code = (
        f"import sys, torch; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        "from task_checks import digest; from evokernel.tasks import get_task; "
        "t = get_task('gqa_decode_attention'); "
        "s = next(s for s in t.scenarios('cpu') if s.name == 'b1_ctx64'); "
        "print(digest(t.make_inputs(s, 42, torch.float16)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == digest(TASK.make_inputs(s, 42, torch.float16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_junk_lies_exactly_past_seq_lens(dtype):
    kinds = set()
    for s in CPU:
        for seed in range(4):
            inputs = TASK.make_inputs(s, seed, dtype)
            k, v = inputs["k_cache"].float(), inputs["v_cache"].float()
            kind = TASK.junk_kind(s, seed)
            for b, n in enumerate(inputs["seq_lens"].tolist()):
                assert n == s.params["seq_lens"][b]
                for valid in (k[b, :, :n], v[b, :, :n]):
                    assert bool(torch.isfinite(valid).all()) and valid.abs().max() < 30
                if n == s.params["S_max"]:
                    continue
                kinds.add(kind)
                k_junk, v_junk = k[b, :, n:], v[b, :, n:]
                if kind == "nan":
                    assert bool(k_junk.isnan().all())
                else:
                    assert bool(torch.isfinite(k_junk).all()) and k_junk.abs().min() >= 30
                assert bool(torch.isfinite(v_junk).all()) and v_junk.abs().min() >= 500
    assert kinds == {"nan", "finite"}


def _naive(inputs) -> torch.Tensor:
    """Per head, per position, plain Python floats: shares no code with the reference."""
    q, k, v = inputs["q"].double(), inputs["k_cache"].double(), inputs["v_cache"].double()
    B, Hq, D = q.shape
    group = Hq // k.shape[1]
    out = torch.zeros((B, Hq, D), dtype=torch.float64)
    for b in range(B):
        n = int(inputs["seq_lens"][b])
        for h in range(Hq):
            kh, vh = k[b, h // group], v[b, h // group]
            scores = [float(torch.dot(q[b, h], kh[j])) * inputs["scale"] for j in range(n)]
            top = max(scores)
            weights = [math.exp(x - top) for x in scores]
            total = sum(weights)
            for j in range(n):
                out[b, h] += (weights[j] / total) * vh[j]
    return out


def test_reference_equals_a_naive_loop():
    small = [s for s in CPU if sum(s.params["seq_lens"]) * s.params["Hq"] <= 2000]
    assert len(small) >= 4
    for s in small:
        inputs = TASK.make_inputs(s, 3, torch.float32)
        ref = TASK.reference(inputs)
        assert ref.dtype == torch.float64 and ref.shape == TASK.output_spec(inputs).shape
        assert torch.allclose(ref, _naive(inputs), rtol=1e-10, atol=1e-12), s.name


def test_baselines_match_the_reference_on_finite_junk():
    tol = TASK.tolerance(torch.float32)
    checked = set()
    for s in CPU:
        seed = next(i for i in range(20) if TASK.junk_kind(s, i) == "finite")
        inputs = TASK.make_inputs(s, seed, torch.float32)
        ref = TASK.reference(inputs)
        for name, fn in TASK.baselines(s).items():
            out = fn(**inputs)
            assert out.dtype == torch.float32 and passes(out, ref, tol), (s.name, name)
            checked.add(name)
    assert checked == {"sdpa_masked", "sdpa_sliced"}


def test_the_sliced_baseline_ignores_nan_junk():
    s = _by_name("b1_ctx64")
    seed = next(i for i in range(20) if TASK.junk_kind(s, i) == "nan")
    inputs = TASK.make_inputs(s, seed, torch.float32)
    out = TASK.baselines(s)["sdpa_sliced"](**inputs)
    assert passes(out, TASK.reference(inputs), TASK.tolerance(torch.float32))


def test_mixed_lengths_offer_the_masked_baseline_only():
    mixed = [s for s in CPU if len(set(s.params["seq_lens"])) > 1]
    assert mixed and all(set(TASK.baselines(s)) == {"sdpa_masked"} for s in mixed)


def test_perturb_changes_queries_in_place_only():
    s = _by_name("b1_ctx64")
    inputs = TASK.make_inputs(s, 1, torch.float32)
    before = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    ptr = inputs["q"].data_ptr()
    TASK.perturb(inputs, 9)
    assert inputs["q"].data_ptr() == ptr and not torch.equal(inputs["q"], before["q"])
    for key in ("k_cache", "v_cache", "seq_lens"):
        assert torch.equal(inputs[key].nan_to_num(), before[key].nan_to_num())
    again = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in before.items()}
    TASK.perturb(again, 9)
    assert torch.equal(again["q"], inputs["q"])


def test_roofline_counts():
    s = next(s for s in TASK.scenarios("cuda") if s.name == "b1_ctx1024")
    kv = 2 * 1024 * 8 * 128 * 2  # K and V, valid positions, bf16
    assert TASK.rotating_bytes(s, torch.bfloat16) == kv
    assert TASK.bytes_moved(s, torch.bfloat16) == kv + 2 * 16 * 128 * 2 + 4
    assert TASK.flops(s) == 4 * 16 * 128 * 1024
    # one layer's KV bytes per token of context: 114,688 B over Qwen3-0.6B's 28 layers
    assert TASK.rotating_bytes(s, torch.bfloat16) // 1024 * 28 == 114_688
    b8 = next(s for s in TASK.scenarios("cuda") if s.name == "b8_ctx1024")
    assert TASK.rotating_bytes(b8, torch.float16) == 8 * kv


def _ignore_mask(q, k_cache, v_cache, seq_lens, scale):
    k = k_cache.repeat_interleave(q.shape[1] // k_cache.shape[1], dim=1).float()
    v = v_cache.repeat_interleave(q.shape[1] // k_cache.shape[1], dim=1).float()
    p = torch.softmax(torch.einsum("bhd,bhnd->bhn", q.float(), k) * scale, dim=-1)
    return torch.einsum("bhn,bhnd->bhd", p, v).to(q.dtype)


def _wrong_heads(q, k_cache, v_cache, seq_lens, scale):
    # query head h reads kv head h % Hkv instead of h // group
    Hkv = k_cache.shape[1]
    idx = torch.arange(q.shape[1]) % Hkv
    out = torch.empty_like(q)
    for b, n in enumerate(seq_lens.tolist()):
        k, v = k_cache[b, idx, :n].float(), v_cache[b, idx, :n].float()
        p = torch.softmax(torch.einsum("hd,hnd->hn", q[b].float(), k) * scale, dim=-1)
        out[b] = torch.einsum("hn,hnd->hd", p, v).to(q.dtype)
    return out


TRIVIAL = {
    "zeros": lambda q, **_: torch.zeros_like(q),
    "query": lambda q, **_: q.clone(),
    "constant": lambda q, **_: torch.full_like(q, 0.5),
    "ignores_mask": _ignore_mask,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_trivial_candidates_fail(dtype):
    for s in TASK.scenarios("cpu"):
        inputs = TASK.make_inputs(s, 2, dtype)
        ref = TASK.reference(inputs)
        for name, fn in TRIVIAL.items():
            assert not passes(fn(**inputs), ref, TASK.tolerance(dtype)), (s.name, name)


def test_wrong_head_mapping_fails_wherever_the_group_exceeds_one():
    grouped = [s for s in CPU if s.params["Hq"] > s.params["Hkv"]]
    assert len(grouped) >= 8
    for s in grouped:
        inputs = TASK.make_inputs(s, 4, torch.float32)
        out = _wrong_heads(**inputs)
        assert not passes(out, TASK.reference(inputs), TASK.tolerance(torch.float32)), s.name
