"""`decode_layer` on a GPU (run by scripts/gpu_check.sh): the seed and both baselines within
the tolerance in bfloat16 and float16 on every public and hidden GPU scenario, every value
of every knob of the seed correct with PDL live (sm_90+), and layers captured four to a CUDA
graph (as the evaluator times them) that replay correctly on new contents."""

from __future__ import annotations

import pytest
import torch
from task_checks import knob_axes, load_candidate, passes

from evokernel.tasks import get_task
from evokernel.tasks.base import Scenario
from evokernel.tasks.decode_layer import task as layer_task

pytestmark = pytest.mark.gpu

TASK = get_task("decode_layer")


def _clone(inputs: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _observed(fn, inputs: dict) -> torch.Tensor:
    x = _clone(inputs)
    before = {k: x[k].clone() for k in TASK.writes}
    out = fn(**x)
    torch.cuda.synchronize()
    got = TASK.observe(x, out, before)
    assert isinstance(got, torch.Tensor), got
    return got.cpu()


def _impls(tmp_path) -> dict:
    seed = load_candidate(TASK.seed_candidate, tmp_path).decode_layer
    return {"seed": seed, "engine": layer_task.engine_layer, "torch": layer_task.torch_layer}


@pytest.mark.slow
def test_seed_and_baselines_are_correct_on_every_gpu_scenario(tmp_path):
    impls = _impls(tmp_path)
    for seed in (0, 1):
        scenarios = (TASK.scenarios("cuda") if seed == 0 else []) + TASK.hidden_scenarios(
            "cuda", seed
        )
        for s in scenarios:
            for dtype in (torch.bfloat16, torch.float16):
                inputs = TASK.make_inputs(s, seed, dtype, "cuda")
                ref = TASK.reference(inputs)
                for name, fn in impls.items():
                    got = _observed(fn, inputs)
                    assert passes(got, ref, TASK.tolerance(dtype)), (name, s.name, dtype)
                del inputs
                torch.cuda.empty_cache()


@pytest.mark.slow
def test_every_knob_value_is_correct_with_pdl(tmp_path):
    module = load_candidate(TASK.seed_candidate, tmp_path)
    if torch.cuda.get_device_capability()[0] >= 9:
        assert module._pdl_ok(torch.device("cuda"))
    qwen06 = {"H": 1024, "Hq": 16, "Hkv": 8, "D": 128, "I": 3072, "qkv_bias": False}
    scenarios = [  # the split path, three sequences (the rows kernel); head dim 64, group 4
        Scenario("split_b3", {**qwen06, "qk_norm": True, "B": 3, "S_max": 700,
                              "seq_lens": (1, 333, 650)}),
        Scenario("d64", {"H": 2048, "Hq": 32, "Hkv": 8, "D": 64, "I": 600, "qkv_bias": True,
                         "qk_norm": False, "B": 1, "S_max": 2100, "seq_lens": (2077,)}),
    ]  # fmt: skip
    inputs = [TASK.make_inputs(s, 3, torch.bfloat16, "cuda") for s in scenarios]
    refs = [TASK.reference(x) for x in inputs]
    for knobs in knob_axes("decode_layer"):
        fn = load_candidate(TASK.seed_candidate, tmp_path, knobs).decode_layer
        for s, x, ref in zip(scenarios, inputs, refs):
            got = _observed(fn, x)
            assert passes(got, ref, TASK.tolerance(torch.bfloat16)), (knobs, s.name)


def _graph(fn, copies: list[dict]) -> tuple[torch.cuda.CUDAGraph, list]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x in copies:  # compile and warm up outside the capture
            fn(**x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [fn(**x) for x in copies]
    return graph, outs


def test_four_layers_captured_in_a_graph_replay_new_contents(tmp_path):
    for s in (TASK.scenarios("cuda")[0], TASK.hidden_scenarios("cuda", 0)[2]):
        base = TASK.make_inputs(s, 1, torch.bfloat16, "cuda")
        for name, fn in _impls(tmp_path).items():
            copies = [_clone(base) for _ in range(TASK.graph_layers)]
            graph, outs = _graph(fn, copies)
            for j, x in enumerate(copies):  # new h, the caches as built: same storage
                x["k_cache"].copy_(base["k_cache"])
                x["v_cache"].copy_(base["v_cache"])
                TASK.perturb(x, 100 + j)
            fresh = [_clone(x) for x in copies]
            graph.replay()
            torch.cuda.synchronize()
            for j, x in enumerate(copies):
                got = TASK.observe(x, outs[j], None)
                assert isinstance(got, torch.Tensor)
                ref = TASK.reference(fresh[j])
                assert passes(got.cpu(), ref, TASK.tolerance(torch.bfloat16)), (name, s.name, j)
