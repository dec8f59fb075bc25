"""The seed candidates: well-formed EVOLVE-BLOCK files with a small declared knob space, and
correct under the Triton interpreter on every CPU scenario, in float32 and float16, at the
seed's knobs and at a sample of other combinations (the extremes included)."""

from __future__ import annotations

import ast
import math
import random

import pytest
import torch
from task_checks import knob_space, load_candidate, passes

from evokernel.tasks import TASK_NAMES, get_task
from evokernel.tasks.base import Scenario
from evokernel.tasks.blocks import find_block, parse_knobs

# The interpreter turns loop bounds loaded from memory (seq_lens) into ints through a path
# NumPy deprecates; it works with the NumPy < 2.4 that CPU installs pin.
pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array:DeprecationWarning")

ALLOWED_IMPORTS = {"torch", "triton", "triton.language", "math", "functools", "typing"}


@pytest.mark.parametrize("name", TASK_NAMES)
def test_seed_is_a_well_formed_candidate(name):
    task = get_task(name)
    source = task.seed_candidate.read_text()
    block = find_block(source)
    knobs = parse_knobs(source)
    assert all(block.start < k.line < block.end for k in knobs)
    assert 24 <= math.prod(len(k.choices) for k in knobs) <= 64
    tree = ast.parse(source)
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert imported <= ALLOWED_IMPORTS, imported - ALLOWED_IMPORTS
    entry = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == task.entry_point]
    assert len(entry) == 1 and entry[0].lineno - 1 > block.end  # fixed, outside the block


def _check(task, fn, scenarios: list[Scenario], dtypes, seed: int = 0) -> None:
    for s in scenarios:
        for dtype in dtypes:
            inputs = task.make_inputs(s, seed, dtype)
            copies = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
            out = fn(**inputs)
            assert type(out) is torch.Tensor
            spec = task.output_spec(inputs)
            assert tuple(out.shape) == spec.shape and out.dtype == spec.dtype, s.name
            ok = passes(out, task.reference(inputs), task.tolerance(dtype))
            assert ok, f"{s.name} {dtype}"
            for key, before in copies.items():
                assert torch.equal(inputs[key].nan_to_num(), before.nan_to_num()), key


@pytest.mark.parametrize("name", TASK_NAMES)
def test_seed_is_correct_on_every_cpu_scenario(name, tmp_path):
    task = get_task(name)
    module = load_candidate(task.seed_candidate, tmp_path)
    scenarios = task.scenarios("cpu") + task.hidden_scenarios("cpu", 0)
    _check(task, getattr(module, task.entry_point), scenarios, task.dtypes["cpu"])


@pytest.mark.parametrize("name", TASK_NAMES)
def test_seed_is_correct_on_other_hidden_draws(name, tmp_path):
    task = get_task(name)
    fn = getattr(load_candidate(task.seed_candidate, tmp_path), task.entry_point)
    _check(task, fn, task.hidden_scenarios("cpu", 1), (torch.float32,), seed=1)


# Small shapes that still exercise every edge: odd and mixed lengths, seq_len 1 and S_max,
# D=64 and 128, groups of 2 and 1; N and K below one tile and several tiles deep. Few programs:
# the interpreter runs them one by one. S_max 140 splits the context when DIRECT_MAX is 128.
KNOB_SCENARIOS = {
    "gqa_decode_attention": [
        Scenario("mixed", {"B": 2, "Hq": 2, "Hkv": 1, "D": 64, "S_max": 75, "seq_lens": (1, 75)}),
        Scenario("mha", {"B": 1, "Hq": 1, "Hkv": 1, "D": 128, "S_max": 140, "seq_lens": (131,)}),
    ],
    "decode_linear": [
        Scenario("odd", {"M": 3, "N": 70, "K": 301}),
        Scenario("tiny", {"M": 8, "N": 5, "K": 9}),
    ],
}


def _sample(name: str) -> list[dict]:
    space = knob_space(name)
    rng = random.Random(0)
    return [space[0], space[-1], *rng.sample(space[1:-1], 4)]


@pytest.mark.parametrize(
    ("name", "knobs"), [(n, k) for n in TASK_NAMES for k in _sample(n)], ids=lambda v: str(v)
)
def test_knob_combinations_are_correct(name, knobs, tmp_path):
    task = get_task(name)
    fn = getattr(load_candidate(task.seed_candidate, tmp_path, knobs), task.entry_point)
    _check(task, fn, KNOB_SCENARIOS[name], (torch.float32, torch.float16))


def test_every_chunk_size_of_the_attention_seed_handles_short_sequences(tmp_path):
    # A long cache splits the context into chunks; a short sequence leaves most of them
    # empty, and the combine must skip those.
    task = get_task("gqa_decode_attention")
    s = Scenario("short", {"B": 2, "Hq": 2, "Hkv": 1, "D": 64, "S_max": 300, "seq_lens": (3, 300)})
    chunks = next(k for k in parse_knobs(task.seed_candidate.read_text()) if k.name == "MIN_CHUNK")
    for chunk in chunks.choices:
        knobs = {"MIN_CHUNK": chunk, "DIRECT_MAX": 128, "BLOCK_N": 32}
        module = load_candidate(task.seed_candidate, tmp_path, knobs)
        assert module._split(300, 2, torch.device("cpu")) > 1
        _check(task, module.attention, [s], (torch.float32,))
