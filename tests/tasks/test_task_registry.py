"""The task registry and the shape of every task's scenarios."""

from __future__ import annotations

import subprocess
import sys

import pytest

from evokernel.errors import TaskError
from evokernel.tasks import TASK_NAMES, all_tasks, get_task
from evokernel.tasks.base import Task

REGIMES = {
    "gqa_decode_attention": {"short", "long"},
    "decode_linear": {"narrow", "wide"},
}


def test_names_resolve_to_tasks_with_a_seed():
    assert TASK_NAMES == ("gqa_decode_attention", "decode_linear")
    for name in TASK_NAMES:
        task = get_task(name)
        assert isinstance(task, Task) and task.name == name
        assert task.seed_candidate.is_file()
        assert task.entry_point in task.interface
        assert get_task(name) is task  # built once
    assert [t.name for t in all_tasks()] == list(TASK_NAMES)


def test_unknown_task_names_the_known_ones():
    with pytest.raises(TaskError, match="gqa_decode_attention, decode_linear"):
        get_task("attention")


def test_tasks_load_without_triton():
    # The evaluator's parent builds inputs and references before it picks a Triton mode.
    code = (
        "import sys; from evokernel.tasks import all_tasks; "
        "from evokernel.tasks.describe import describe; "
        "[describe(t) for t in all_tasks()]; print('triton' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("name", TASK_NAMES)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_public_scenarios_are_named_regimed_and_visible(name, device):
    task = get_task(name)
    scenarios = task.scenarios(device)
    assert len({s.name for s in scenarios}) == len(scenarios) >= 4
    assert {s.regime for s in scenarios} == REGIMES[name]  # both regimes on every device
    assert not any(s.hidden for s in scenarios)
    for s in scenarios:
        assert task.baselines(s), s.name
        assert task.bytes_moved(s, task.dtypes[device][0]) > 0 and task.flops(s) > 0


@pytest.mark.parametrize("name", TASK_NAMES)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_hidden_scenarios_follow_the_seed(name, device):
    task = get_task(name)
    first = task.hidden_scenarios(device, 11)
    assert first == task.hidden_scenarios(device, 11)
    assert first != task.hidden_scenarios(device, 12)
    assert all(s.hidden for s in first)
    assert len({s.name for s in first}) == len(first)
    public = {s.name for s in task.scenarios(device)}
    assert not public & {s.name for s in first}


def test_gpu_public_shapes_are_qwen3_06b():
    attention = get_task("gqa_decode_attention").scenarios("cuda")
    assert [s.name for s in attention] == [
        "b1_ctx128",
        "b1_ctx512",
        "b1_ctx1024",
        "b1_ctx4096",
        "b1_ctx16384",
        "b1_ctx65536",
        "b8_ctx1024",
    ]
    for s in attention:
        p = s.params
        assert (p["Hq"], p["Hkv"], p["D"]) == (16, 8, 128)
        assert p["S_max"] > max(p["seq_lens"])  # junk past the context
        assert s.regime == ("short" if max(p["seq_lens"]) <= 1024 else "long")
    linear = {s.name: s.params for s in get_task("decode_linear").scenarios("cuda")}
    assert linear["qkv_m1"] == {"M": 1, "N": 4096, "K": 1024}
    assert linear["o_m1"] == {"M": 1, "N": 1024, "K": 2048}
    assert linear["gate_up_m1"] == {"M": 1, "N": 6144, "K": 1024}
    assert linear["down_m1"] == {"M": 1, "N": 1024, "K": 3072}
    assert linear["lm_head_m1"] == {"M": 1, "N": 151936, "K": 1024}
    assert {p["M"] for p in linear.values()} == {1, 8}
