"""`decode_layer`'s seed and baselines under the interpreter: a well-formed candidate whose
defaults are the engine's choices, bit-identical to the engine's layer, both baselines correct
on every CPU scenario, and every setting of the declared knob space correct (the structural
knobs select code: each combination must be a correct program)."""

from __future__ import annotations

import ast
import math

import pytest
import torch
from task_checks import knob_space, load_candidate, passes

from evokernel.evaluate.static import check_source, triton_kernels
from evokernel.ops.decode import DecodeTuning
from evokernel.tasks import get_task
from evokernel.tasks.base import Scenario
from evokernel.tasks.blocks import find_block, parse_knobs
from evokernel.tasks.decode_layer import task as layer_task

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array:DeprecationWarning")

TASK = get_task("decode_layer")
SOURCE = TASK.seed_candidate.read_text()
ALLOWED_IMPORTS = {"torch", "triton", "triton.language", "triton.language.extra.cuda", "functools"}
KNOBS = {
    "TILE_BYTES": (16384, 32768, 65536),
    "ATTN_BLOCK_N": (32, 64),
    "PDL": (False, True),
    "SPLIT_KV": (False, True),
    "EXP2": (False, True),
    "FUSE_GATE_UP": (False, True),
}


def _clone(inputs: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _observed(fn, inputs: dict) -> torch.Tensor:
    """What the evaluator judges for one call on a copy of `inputs` (stray writes rejected)."""
    x = _clone(inputs)
    before = {k: x[k].clone() for k in TASK.writes}
    got = TASK.observe(x, fn(**x), before)
    assert isinstance(got, torch.Tensor), got
    for key, value in inputs.items():  # nothing else written
        if isinstance(value, torch.Tensor) and key not in TASK.writes:
            assert torch.equal(x[key], value), key
    return got


def test_seed_is_a_well_formed_candidate():
    block = find_block(SOURCE)
    knobs = parse_knobs(SOURCE)
    assert {k.name: k.choices for k in knobs} == KNOBS
    assert all(block.start < k.line < block.end for k in knobs)
    assert math.prod(len(c) for c in KNOBS.values()) == len(knob_space("decode_layer")) == 96
    assert check_source(SOURCE) == []
    assert len(triton_kernels(SOURCE)) >= 7
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
    values = {k.name: k.value for k in parse_knobs(SOURCE)}
    engine = DecodeTuning()
    assert values["TILE_BYTES"] == engine.tile_bytes
    assert values["ATTN_BLOCK_N"] == engine.attn_block_n
    assert values["PDL"] and values["SPLIT_KV"] and values["EXP2"] and values["FUSE_GATE_UP"]
    module = load_candidate(TASK.seed_candidate, tmp_path)
    fixed = {
        "GEMV_WARPS": engine.gemv_warps,
        "ATTN_WARPS": engine.attn_warps,
        "COMBINE_WARPS": engine.combine_warps,
        "SHORT_BLOCK_N": engine.short_block_n,
        "SHORT_MAX": engine.short_max,
        "SHORT_MMA": engine.short_mma,
        "DIRECT_MAX": engine.direct_max,
        "MIN_CHUNK": engine.min_chunk,
        "PROGRAMS_PER_SM": engine.attn_programs_per_sm,
        "MAX_SPLIT": engine.max_split,
    }
    assert {k: getattr(module, k) for k in fixed} == fixed
    assert not module._pdl_ok(torch.device("cpu"))  # PDL only on a compiled sm_90+ GPU


def test_seed_is_bit_identical_to_the_engine_layer(tmp_path):
    fn = load_candidate(TASK.seed_candidate, tmp_path).decode_layer
    for s in (TASK.scenarios("cpu")[3], TASK.hidden_scenarios("cpu", 0)[2]):  # split; B = 3
        for dtype in (torch.float32, torch.float16):
            inputs = TASK.make_inputs(s, 4, dtype)
            seed = _observed(fn, inputs)
            assert torch.equal(seed, _observed(layer_task.engine_layer, inputs)), s.name
            assert passes(seed, TASK.reference(inputs), TASK.tolerance(dtype)), s.name


@pytest.mark.parametrize("baseline", ["engine", "torch"])
def test_baselines_are_correct_on_every_cpu_scenario(baseline):
    for s in TASK.scenarios("cpu") + TASK.hidden_scenarios("cpu", 0):
        fn = TASK.baselines(s)[baseline]
        for dtype in TASK.dtypes["cpu"]:
            inputs = TASK.make_inputs(s, 0, dtype)
            got = _observed(fn, inputs)
            assert passes(got, TASK.reference(inputs), TASK.tolerance(dtype)), (s.name, dtype)


# One scenario that reaches every knob's code: a cache longer than DIRECT_MAX (the split path
# with SPLIT_KV, empty chunks for the short sequence), two sequences (the row loops and the
# SiLU-mul grid), one of length 1, odd sizes. float32 and float16 alternate over the settings.
KNOB_SCENARIO = Scenario(
    "knobs",
    {"H": 72, "Hq": 2, "Hkv": 1, "D": 32, "I": 90, "B": 2, "S_max": 260, "seq_lens": (1, 41)},
)


@pytest.mark.slow
@pytest.mark.parametrize("tile_bytes", KNOBS["TILE_BYTES"])
def test_every_knob_setting_is_correct(tile_bytes, tmp_path):
    space = knob_space("decode_layer")
    settings = [(i, k) for i, k in enumerate(space) if k["TILE_BYTES"] == tile_bytes]
    assert len(settings) == len(space) // len(KNOBS["TILE_BYTES"])
    inputs = {d: TASK.make_inputs(KNOB_SCENARIO, 1, d) for d in (torch.float32, torch.float16)}
    refs = {d: TASK.reference(x) for d, x in inputs.items()}
    for index, knobs in settings:
        module = load_candidate(TASK.seed_candidate, tmp_path, knobs)
        if knobs["SPLIT_KV"]:
            assert module._split(260, 2, torch.device("cpu")) > 1
        dtype = (torch.float32, torch.float16)[index % 2]
        got = _observed(module.decode_layer, inputs[dtype])
        assert passes(got, refs[dtype], TASK.tolerance(dtype)), (knobs, dtype)
