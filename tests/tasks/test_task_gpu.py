"""GPU checks of the tasks and their seeds (run by scripts/gpu_check.sh): correctness in
bfloat16 and float16 on every public and hidden GPU scenario, the corners of the knob space on
small shapes (every combination compiles: seed_compile.py --all), CUDA-graph capture and
replay with new contents, and the stock baselines."""

from __future__ import annotations

import pytest
import torch
from task_checks import knob_corners, load_candidate, passes

from evokernel.tasks import TASK_NAMES, get_task
from evokernel.tasks.base import Scenario

pytestmark = pytest.mark.gpu


def _cuda(inputs: dict) -> dict:
    return {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _check(task, fn, scenarios, dtypes, seed=0) -> None:
    for s in scenarios:
        for dtype in dtypes:
            cpu = task.make_inputs(s, seed, dtype)
            out = fn(**_cuda(cpu))
            torch.cuda.synchronize()
            assert type(out) is torch.Tensor and out.is_cuda and out.dtype == dtype
            assert passes(out.cpu(), task.reference(cpu), task.tolerance(dtype)), (
                f"{s.name} {dtype}"
            )


@pytest.mark.parametrize("name", TASK_NAMES)
def test_seed_is_correct_on_every_gpu_scenario(name, tmp_path):
    task = get_task(name)
    fn = getattr(load_candidate(task.seed_candidate, tmp_path), task.entry_point)
    _check(task, fn, task.scenarios("cuda"), (torch.bfloat16,))
    for seed in (0, 1):
        _check(task, fn, task.hidden_scenarios("cuda", seed), task.dtypes["cuda"], seed=seed)


SMALL = {
    "gqa_decode_attention": [
        Scenario(
            "mixed", {"B": 3, "Hq": 16, "Hkv": 8, "D": 128, "S_max": 333, "seq_lens": (1, 333, 97)}
        ),
        Scenario(
            "ratio5_d64", {"B": 1, "Hq": 40, "Hkv": 8, "D": 64, "S_max": 2100, "seq_lens": (2077,)}
        ),
    ],
    "decode_linear": [
        Scenario("odd", {"M": 5, "N": 1000, "K": 3001}),
        Scenario("tiny", {"M": 1, "N": 3, "K": 7}),
    ],
}


@pytest.mark.parametrize("name", TASK_NAMES)
def test_knob_corners_are_correct(name, tmp_path):
    # Every combination compiles for sm_90 (seed_compile.py --all); these run on the device.
    task = get_task(name)
    for values in knob_corners(name):
        fn = getattr(load_candidate(task.seed_candidate, tmp_path, values), task.entry_point)
        try:
            _check(task, fn, SMALL[name], (torch.bfloat16,))
        except AssertionError as err:
            raise AssertionError(f"knobs {values}: {err}") from None


def _replay_checks(task, fn, inputs: dict, update) -> None:
    """Capture fn(**inputs) in a CUDA graph, then change the inputs in place and replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(**inputs)  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(**inputs)
    dtype = out.dtype
    for step in range(3):
        update(inputs, step)
        graph.replay()
        torch.cuda.synchronize()
        cpu = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        assert passes(out.cpu(), task.reference(cpu), task.tolerance(dtype)), f"replay {step}"


@pytest.mark.parametrize("knobs", [{}, {"DIRECT_MAX": 128, "MIN_CHUNK": 64, "BLOCK_N": 32}])
def test_attention_seed_replays_in_a_cuda_graph(knobs, tmp_path):
    task = get_task("gqa_decode_attention")
    fn = load_candidate(task.seed_candidate, tmp_path, knobs).attention
    B, Hq, Hkv, D, S_max = 2, 16, 8, 128, 700
    g = torch.Generator().manual_seed(0)
    inputs = {
        "q": torch.randn((B, Hq, D), generator=g).bfloat16().cuda(),
        "k_cache": torch.randn((B, Hkv, S_max, D), generator=g).bfloat16().cuda(),
        "v_cache": torch.randn((B, Hkv, S_max, D), generator=g).bfloat16().cuda(),
        "seq_lens": torch.tensor([300, 517], dtype=torch.int32).cuda(),
        "scale": D**-0.5,
    }
    lengths = [(300, 517), (1, 700), (699, 77)]

    def update(x: dict, step: int) -> None:
        x["seq_lens"].copy_(torch.tensor(lengths[step], dtype=torch.int32))
        x["q"].copy_(torch.randn((B, Hq, D), generator=g).bfloat16())

    _replay_checks(task, fn, inputs, update)


@pytest.mark.parametrize("knobs", [{}, {"SPLIT_K": 4}])
def test_linear_seed_replays_in_a_cuda_graph(knobs, tmp_path):
    task = get_task("decode_linear")
    fn = load_candidate(task.seed_candidate, tmp_path, knobs).linear
    g = torch.Generator().manual_seed(0)
    inputs = {
        "x": torch.randn((1, 2048), generator=g).bfloat16().cuda(),
        "weight": (torch.randn((1024, 2048), generator=g) / 45).bfloat16().cuda(),
    }

    def update(x: dict, step: int) -> None:
        x["x"].copy_(torch.randn((1, 2048), generator=g).bfloat16())

    _replay_checks(task, fn, inputs, update)


def test_attention_baselines_on_the_gpu():
    task = get_task("gqa_decode_attention")
    for s in task.scenarios("cuda")[:4] + task.hidden_scenarios("cuda", 0):
        seed = next(i for i in range(20) if task.junk_kind(s, i) == "finite")
        cpu = task.make_inputs(s, seed, torch.bfloat16)
        ref = task.reference(cpu)
        for name, fn in task.baselines(s).items():
            out = fn(**_cuda(cpu)).cpu()
            assert passes(out, ref, task.tolerance(torch.bfloat16)), (s.name, name)


def test_linear_baseline_on_the_gpu():
    task = get_task("decode_linear")
    for s in task.scenarios("cuda"):
        cpu = task.make_inputs(s, 0, torch.bfloat16)
        out = task.baselines(s)["F.linear"](**_cuda(cpu)).cpu()
        assert passes(out, task.reference(cpu), task.tolerance(torch.bfloat16)), s.name


_BUILD_ON_GPU = """
import sys, hashlib, torch
from evokernel.tasks import get_task
task = get_task(sys.argv[1])
s = task.scenarios("cuda")[-1]
inputs = task.make_inputs(s, 7, torch.bfloat16, "cuda")
task.perturb(inputs, 3)
h = hashlib.sha256()
for k, v in sorted(inputs.items()):
    if isinstance(v, torch.Tensor):
        h.update(v.cpu().view(torch.uint8).numpy().tobytes() if v.dtype != torch.int32
                 else v.cpu().numpy().tobytes())
print(h.hexdigest())
"""


@pytest.mark.parametrize("name", TASK_NAMES)
def test_inputs_built_on_the_gpu_are_identical_across_processes(name):
    """The evaluator's parent and worker build a job's inputs on one GPU independently: two
    processes must get the same bits (the reference is computed from the parent's)."""
    import subprocess
    import sys

    runs = [
        subprocess.run([sys.executable, "-c", _BUILD_ON_GPU, name], capture_output=True,
                       text=True, check=True).stdout.strip()
        for _ in range(2)
    ]  # fmt: skip
    assert runs[0] == runs[1] and len(runs[0]) == 64


@pytest.mark.parametrize("name", TASK_NAMES)
def test_reference_on_the_gpu_matches_the_cpu(name):
    task = get_task(name)
    for s in task.scenarios("cuda")[:3] + task.hidden_scenarios("cuda", 2)[:3]:
        inputs = task.make_inputs(s, 4, torch.bfloat16, "cuda")
        on_gpu = task.reference(inputs)
        on_cpu = task.reference({k: v.cpu() if isinstance(v, torch.Tensor) else v
                                 for k, v in inputs.items()})  # fmt: skip
        assert on_gpu.device.type == "cpu" and on_gpu.dtype == torch.float64
        torch.testing.assert_close(on_gpu, on_cpu, rtol=1e-9, atol=1e-9)
