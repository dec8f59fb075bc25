"""`decode_linear`: inputs, reference, baseline, roofline, and that trivial candidates fail."""

from __future__ import annotations

import pytest
import torch
from task_checks import digest, linear_in, passes

from evokernel.tasks import get_task
from evokernel.tasks.decode_linear import task as linear_task

TASK = get_task("decode_linear")
CPU = TASK.scenarios("cpu") + TASK.hidden_scenarios("cpu", 0) + TASK.hidden_scenarios("cpu", 1)


def test_inputs_are_a_function_of_scenario_seed_and_dtype():
    s = TASK.scenarios("cpu")[0]
    a = TASK.make_inputs(s, 5, torch.float16)
    assert digest(a) == digest(TASK.make_inputs(s, 5, torch.float16))
    assert digest(a) != digest(TASK.make_inputs(s, 6, torch.float16))
    M, N, K = (s.params[k] for k in ("M", "N", "K"))
    assert a["x"].shape == (M, K) and a["weight"].shape == (N, K)
    assert a["x"].dtype == a["weight"].dtype == torch.float16
    assert TASK.output_spec(a).shape == (M, N) and TASK.output_spec(a).dtype == torch.float16


def test_hidden_shapes_cover_odd_sizes_and_every_m():
    for device in ("cpu", "cuda"):
        ms, odd_n, odd_k = set(), 0, 0
        for seed in range(6):
            for s in TASK.hidden_scenarios(device, seed):
                ms.add(s.params["M"])
                odd_n += s.params["N"] % 64 != 0
                odd_k += s.params["K"] % 64 != 0
        assert {1, 3, 5, 8} <= ms and odd_n >= 24 and odd_k >= 24
        smallest = min(s.params["N"] * s.params["K"] for s in TASK.hidden_scenarios(device, 0))
        assert smallest <= 7 * 15


def test_reference_equals_a_naive_loop():
    for s in CPU[:8]:
        inputs = TASK.make_inputs(s, 1, torch.float32)
        x, w = inputs["x"].double(), inputs["weight"].double()
        naive = torch.tensor(
            [[float((x[m] * w[n]).sum()) for n in range(w.shape[0])] for m in range(x.shape[0])],
            dtype=torch.float64,
        )
        ref = TASK.reference(inputs)
        assert ref.dtype == torch.float64
        assert torch.allclose(ref, naive, rtol=1e-10, atol=1e-12), s.name


def test_reference_chunks_wide_weights(monkeypatch):
    monkeypatch.setattr(linear_task, "_REF_ROWS", 7)
    s = next(s for s in TASK.scenarios("cpu") if s.name == "qkv_m8")
    inputs = TASK.make_inputs(s, 0, torch.float32)
    whole = inputs["x"].double() @ inputs["weight"].double().T
    assert torch.allclose(TASK.reference(inputs), whole, rtol=1e-12, atol=1e-12)


def test_baseline_matches_the_reference():
    tol = TASK.tolerance(torch.float32)
    for s in CPU:
        inputs = TASK.make_inputs(s, 2, torch.float32)
        ((name, fn),) = TASK.baselines(s).items()
        assert name == "F.linear" and passes(fn(**inputs), TASK.reference(inputs), tol), s.name


def test_perturb_changes_activations_in_place_only():
    s = TASK.scenarios("cpu")[0]
    inputs = TASK.make_inputs(s, 1, torch.float32)
    x, w = inputs["x"].clone(), inputs["weight"].clone()
    ptr = inputs["x"].data_ptr()
    TASK.perturb(inputs, 3)
    assert inputs["x"].data_ptr() == ptr and not torch.equal(inputs["x"], x)
    assert torch.equal(inputs["weight"], w)


def test_roofline_counts():
    s = next(s for s in TASK.scenarios("cuda") if s.name == "lm_head_m1")
    assert TASK.rotating_bytes(s, torch.bfloat16) == 151936 * 1024 * 2  # 311.2 MB
    assert TASK.bytes_moved(s, torch.bfloat16) == (1024 + 151936 * 1024 + 151936) * 2
    assert TASK.flops(s) == 2 * 151936 * 1024
    # one layer's projections (qkv, o, gate+up, down): 31.46 MB of Qwen3-0.6B's layer
    names = ("qkv_m1", "o_m1", "gate_up_m1", "down_m1")
    layer = sum(
        TASK.rotating_bytes(s, torch.bfloat16) for s in TASK.scenarios("cuda") if s.name in names
    )
    assert round(layer / 1e6, 2) == 31.46


TRIVIAL = {
    "zeros": lambda x, weight: torch.zeros((x.shape[0], weight.shape[0]), dtype=x.dtype),
    "constant": lambda x, weight: torch.ones((x.shape[0], weight.shape[0]), dtype=x.dtype),
    "input": lambda x, weight: x[:, :1].expand(x.shape[0], weight.shape[0]).clone(),
    "half_k": lambda x, weight: linear_in({"x": x[:, ::2], "weight": weight[:, ::2]}, x.dtype),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_trivial_candidates_fail(dtype):
    for s in TASK.scenarios("cpu"):
        inputs = TASK.make_inputs(s, 2, dtype)
        ref = TASK.reference(inputs)
        for name, fn in TRIVIAL.items():
            assert not passes(fn(**inputs), ref, TASK.tolerance(dtype)), (s.name, name)
