"""`decode_layer`'s seed: generated from the engine's sources and checked for drift, a
well-formed candidate whose knobs are the engine's `DecodeTuning`, bit-identical to the
engine's layer, both baselines correct on every CPU scenario of each family, and every
declared knob value a correct program (one knob at a time, the others at their defaults)."""

from __future__ import annotations

import ast

import pytest
import torch
from task_checks import load_candidate, passes

from evokernel.evaluate.static import check_source, triton_kernels
from evokernel.ops.tuning import DEFAULT
from evokernel.tasks import get_task
from evokernel.tasks.base import Scenario
from evokernel.tasks.blocks import find_block, parse_knobs
from evokernel.tasks.decode_layer import generate
from evokernel.tasks.decode_layer import task as layer_task

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array:DeprecationWarning")

TASK = get_task("decode_layer")
SOURCE = TASK.seed_candidate.read_text()
ALLOWED_IMPORTS = {
    "torch", "triton", "triton.language", "triton.language.extra.cuda", "functools", "typing",
}  # fmt: skip
# Shapes of the other families: Qwen2.5-0.5B's switches (biases, no q/k norms) and Llama's.
FAMILY_TASKS = (
    "decode_layer@H64-Hq4-Hkv2-D32-I96-bias-noqknorm",
    "decode_layer@H64-Hq8-Hkv2-D32-I96-noqknorm",
)


def _clone(inputs: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _observed(task, fn, inputs: dict) -> torch.Tensor:
    """What the evaluator judges for one call on a copy of `inputs` (stray writes rejected)."""
    x = _clone(inputs)
    before = {k: x[k].clone() for k in task.writes}
    got = task.observe(x, fn(**x), before)
    assert isinstance(got, torch.Tensor), got
    for key, value in inputs.items():  # nothing else written
        if isinstance(value, torch.Tensor) and key not in task.writes:
            assert torch.equal(x[key], value), key
    return got


def test_the_seed_is_generated_from_the_engines_sources():
    assert generate.generate() == SOURCE, (
        "regenerate: python -m evokernel.tasks.decode_layer.generate"
    )


@pytest.mark.parametrize("path", ["kernels/gemv.py", "kernels/attention.py", "ops/layer.py"])
def test_a_one_character_change_to_a_source_is_drift(path):
    def edited(rel: str) -> str:
        text = generate._read(rel)
        if rel != path:
            return text
        at = text.index("=", text.index("\ndef "))  # inside the first definition
        return text[:at] + "= " + text[at + 1 :]  # one character more

    assert generate.generate(edited) != SOURCE


def test_a_one_character_change_to_the_seed_is_drift(tmp_path, monkeypatch):
    seed = tmp_path / "seed.py"
    seed.write_text(SOURCE.replace("TILE_BYTES = 32768", "TILE_BYTES = 32769", 1))
    monkeypatch.setattr(generate, "SEED", seed)
    assert generate.main(["--check"]) == 1
    seed.write_text(SOURCE)
    assert generate.main(["--check"]) == 0


def test_seed_is_a_well_formed_candidate():
    block = find_block(SOURCE)
    knobs = parse_knobs(SOURCE)
    declared = {f.upper(): v for f, v in generate.KNOBS.items() if len(v) > 1}
    assert {k.name: set(k.choices) for k in knobs} == {k: set(v) for k, v in declared.items()}
    assert all(block.start < k.line < block.end for k in knobs)
    assert check_source(SOURCE) == []
    assert len(triton_kernels(SOURCE)) >= 8
    tree = ast.parse(SOURCE)
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert imported <= ALLOWED_IMPORTS, imported - ALLOWED_IMPORTS
    entry = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "decode_layer"]
    assert len(entry) == 1 and entry[0].lineno - 1 > block.end  # fixed, outside the block


def test_seed_defaults_are_the_engines_choices(tmp_path):
    module = load_candidate(TASK.seed_candidate, tmp_path)
    assert tuple(module._tuning()) == tuple(DEFAULT._replace(pdl=True, cuda_direct=False))
    assert not module._pdl_ok(torch.device("cpu"))  # PDL only on a compiled sm_90+ GPU


@pytest.mark.parametrize("name", ["decode_layer", *FAMILY_TASKS])
def test_seed_is_bit_identical_to_the_engine_layer(name, tmp_path):
    task = get_task(name)
    fn = load_candidate(task.seed_candidate, tmp_path).decode_layer
    for s in (task.scenarios("cpu")[3], task.hidden_scenarios("cpu", 0)[2]):  # split; B = 3
        for dtype in (torch.float32, torch.float16):
            inputs = task.make_inputs(s, 4, dtype)
            seed = _observed(task, fn, inputs)
            assert torch.equal(seed, _observed(task, layer_task.engine_layer, inputs)), s.name
            assert passes(seed, task.reference(inputs), task.tolerance(dtype)), s.name


@pytest.mark.parametrize("name", ["decode_layer", *FAMILY_TASKS])
@pytest.mark.parametrize("baseline", ["engine", "torch"])
def test_baselines_are_correct_on_every_cpu_scenario(name, baseline):
    task = get_task(name)
    for s in task.scenarios("cpu") + task.hidden_scenarios("cpu", 0):
        fn = task.baselines(s)[baseline]
        for dtype in task.dtypes["cpu"]:
            inputs = task.make_inputs(s, 0, dtype)
            got = _observed(task, fn, inputs)
            assert passes(got, task.reference(inputs), task.tolerance(dtype)), (s.name, dtype)


# One scenario that reaches every knob's code: a cache longer than DIRECT_MAX (the split path,
# empty chunks for the short sequence), three sequences (the rows kernel from ROWS_MIN 2 on,
# the one-row kernels' loops below it), one of length 1, odd sizes. float32 and float16
# alternate over the settings.
KNOB_SCENARIO = Scenario(
    "knobs",
    {"H": 72, "Hq": 2, "Hkv": 1, "D": 32, "I": 90, "qkv_bias": False, "qk_norm": True,
     "B": 3, "S_max": 300, "seq_lens": (1, 41, 290)},
)  # fmt: skip
SETTINGS = [
    (knob.name, value)
    for knob in parse_knobs(SOURCE)
    for value in knob.choices
    if value != knob.value
]


@pytest.mark.slow
def test_every_knob_value_is_correct(tmp_path):
    inputs = {d: TASK.make_inputs(KNOB_SCENARIO, 1, d) for d in (torch.float32, torch.float16)}
    refs = {d: TASK.reference(x) for d, x in inputs.items()}
    assert len(SETTINGS) >= 20
    for index, (name, value) in enumerate(SETTINGS):
        module = load_candidate(TASK.seed_candidate, tmp_path, {name: value})
        dtype = (torch.float32, torch.float16)[index % 2]
        got = _observed(TASK, module.decode_layer, inputs[dtype])
        assert passes(got, refs[dtype], TASK.tolerance(dtype)), (name, value, dtype)
