"""`decode_layer`: shape names, scenarios, inputs, the reference against an independent
composition, `observe` (the judged layout and stray cache writes), and the roofline counts."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from task_checks import digest, errors

from evokernel.errors import TaskError
from evokernel.model.config import ModelConfig
from evokernel.model.presets import PRESETS
from evokernel.reasons import reason_code
from evokernel.tasks import TASK_NAMES, get_task
from evokernel.tasks.base import Scenario
from evokernel.tasks.decode_layer import task as layer_task
from evokernel.tasks.decode_layer.scenarios import QWEN3_06B, Shape

TASK = get_task("decode_layer")
CPU = TASK.scenarios("cpu") + TASK.hidden_scenarios("cpu", 0)


def _clone(inputs: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _config(preset: str) -> ModelConfig:
    fields = ModelConfig.__dataclass_fields__
    return ModelConfig(**{k: v for k, v in PRESETS[preset].items() if k in fields})


# --- names -------------------------------------------------------------------------------------


def test_plain_name_is_qwen3_06b_and_shaped_names_parse():
    assert TASK.name == "decode_layer" and TASK.shape == QWEN3_06B
    assert "decode_layer" not in TASK_NAMES  # not listed by all_tasks (see tasks/__init__.py)
    other = get_task("decode_layer@H2048-Hq16-Hkv8-D128-I6144")
    assert other.name == "decode_layer@H2048-Hq16-Hkv8-D128-I6144"
    assert other.shape == Shape(H=2048, Hq=16, Hkv=8, D=128, I=6144)
    assert get_task("decode_layer@H2048-Hq16-Hkv8-D128-I6144") is other  # built once
    for s in other.scenarios("cuda"):
        assert {k: s.params[k] for k in other.shape.params()} == other.shape.params()
    family = get_task("decode_layer@H896-Hq14-Hkv2-D64-I4864-bias-noqknorm")
    assert family.shape == Shape(896, 14, 2, 64, 4864, qkv_bias=True, qk_norm=False)
    assert family.shape.spec() == "H896-Hq14-Hkv2-D64-I4864-bias-noqknorm"
    for s in family.scenarios("cpu") + family.hidden_scenarios("cpu", 0):  # the family kept
        assert (s.params["qkv_bias"], s.params["qk_norm"]) == (True, False)


def test_cpu_scenarios_run_a_tiny_shape_as_it_is():
    tiny = get_task("decode_layer@H64-Hq4-Hkv2-D32-I192")
    big = get_task("decode_layer@H4096-Hq32-Hkv8-D128-I12288")
    for s in tiny.scenarios("cpu") + tiny.hidden_scenarios("cpu", 0)[2:]:
        assert (s.params["H"], s.params["Hq"], s.params["Hkv"], s.params["I"]) == (64, 4, 2, 192)
    for s in big.scenarios("cpu"):  # the stand-in keeps the group size (4)
        assert (s.params["H"], s.params["Hq"], s.params["Hkv"], s.params["D"]) == (128, 8, 2, 32)


@pytest.mark.parametrize(
    ("preset", "name"),
    [
        ("qwen3-0.6b", "decode_layer"),
        ("qwen3-1.7b", "decode_layer@H2048-Hq16-Hkv8-D128-I6144"),
        ("qwen3-4b", "decode_layer@H2560-Hq32-Hkv8-D128-I9728"),
        ("qwen2.5-0.5b", "decode_layer@H896-Hq14-Hkv2-D64-I4864-bias-noqknorm"),
        ("llama-3.2-1b", "decode_layer@H2048-Hq32-Hkv8-D64-I8192-noqknorm"),
    ],
)
def test_a_checkpoint_config_names_its_task(preset, name):
    cfg = _config(preset)
    assert layer_task.name_for(cfg) == name
    assert get_task(name).shape == layer_task.shape_of(cfg)


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("decode_layer@", "malformed task name"),
        ("decode_layer@H2048", "malformed task name"),
        ("decode_layer@H2048-Hq16-Hkv8-D128", "malformed task name"),
        ("decode_layer@h2048-hq16-hkv8-d128-i6144", "malformed task name"),
        ("decode_layer@H2048-Hq16-Hkv8-D128-I6144-x", "malformed task name"),
        ("decode_layer@H2048-Hq16-Hkv8-D128-I6144-noqknorm-bias", "malformed task name"),
        ("decode_layer@H02048-Hq16-Hkv8-D128-I6144", "write the sizes plainly"),
        ("decode_layer@H2048-Hq12-Hkv8-D128-I6144", "must be a multiple of kv heads"),
        ("decode_layer@H2048-Hq16-Hkv8-D96-I6144", "head dim must be"),
        ("decode_layer@H0-Hq16-Hkv8-D128-I6144", "must be positive"),
        ("decode_linear@H2048-Hq16-Hkv8-D128-I6144", "takes no shape suffix"),
        ("decode_layers", "unknown task"),
        ("nope@H1", "unknown task"),
    ],
)
def test_bad_names_are_one_line_task_errors(name, needle):
    with pytest.raises(TaskError, match=needle) as err:
        get_task(name)
    assert "\n" not in str(err.value)


def test_unknown_task_lists_the_layer_task():
    with pytest.raises(TaskError, match="decode_layer"):
        get_task("attention")


def test_an_unsupported_checkpoint_shape_is_a_task_error():
    cfg = ModelConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,
    )
    with pytest.raises(TaskError, match="head dim"):
        layer_task.name_for(cfg)


def test_the_task_loads_and_builds_inputs_without_triton():
    code = (
        "import sys, torch; from evokernel.tasks import get_task; "
        "from evokernel.tasks.describe import describe; "
        "t = get_task('decode_layer@H2048-Hq16-Hkv8-D128-I6144'); describe(t); "
        "s = t.scenarios('cpu')[1]; x = t.make_inputs(s, 0, torch.float32); t.reference(x); "
        "t.observe(x, x['h'], None); t.baselines(s); print('triton' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- scenarios ---------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_public_scenarios(device):
    scenarios = TASK.scenarios(device)
    contexts = [s.params["seq_lens"][0] for s in scenarios]
    assert contexts == ([1, 17, 100, 300] if device == "cpu" else [128, 512, 2048, 8192, 32768])
    assert [s.name for s in scenarios] == [f"b1_ctx{n}" for n in contexts]
    assert {s.regime for s in scenarios} == {"short", "long"}
    short = 64 if device == "cpu" else 1024
    for s in scenarios:
        p = s.params
        assert not s.hidden and p["B"] == 1 and p["S_max"] > max(p["seq_lens"])
        assert s.regime == ("short" if max(p["seq_lens"]) <= short else "long")
        assert set(TASK.baselines(s)) == {"engine", "torch"}
        assert TASK.bytes_moved(s, TASK.dtypes[device][0]) > 0 and TASK.flops(s) > 0
    if device == "cuda":
        assert all(
            (s.params["H"], s.params["Hq"], s.params["Hkv"], s.params["D"], s.params["I"])
            == (1024, 16, 8, 128, 3072)
            for s in scenarios
        )


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_hidden_scenarios_follow_the_seed_and_cover_the_classes(device):
    first = TASK.hidden_scenarios(device, 11)
    assert first == TASK.hidden_scenarios(device, 11)
    assert first != TASK.hidden_scenarios(device, 12)
    public = {s.name for s in TASK.scenarios(device)}
    heads, dims, hidden, batches, lens = set(), set(), set(), set(), []
    for seed in range(8):
        drawn = TASK.hidden_scenarios(device, seed)
        assert all(s.hidden for s in drawn) and len({s.name for s in drawn}) == len(drawn)
        assert not public & {s.name for s in drawn}
        for s in drawn:
            p = s.params
            assert len(p["seq_lens"]) == p["B"] and min(p["seq_lens"]) >= 1
            assert max(p["seq_lens"]) <= p["S_max"] and p["Hq"] % p["Hkv"] == 0
            heads.add(p["Hq"] // p["Hkv"])
            dims.add(p["D"])
            hidden.add(p["H"])
            batches.add(p["B"])
            lens += p["seq_lens"]
    assert {2, 4} <= heads and {64} <= dims and len(dims) >= 2 and 1 in lens
    assert max(batches) >= 3 and sum(n % 2 for n in lens) > len(lens) // 3
    if device == "cuda":
        assert {2048, 2560, 4096} <= hidden and {64, 128} == dims
        assert max(lens) > 10000


# --- inputs ------------------------------------------------------------------------------------


def test_inputs_are_a_function_of_scenario_seed_and_dtype():
    s = TASK.hidden_scenarios("cpu", 0)[2]  # a mixed batch
    a = TASK.make_inputs(s, 5, torch.float16)
    assert digest(a) == digest(TASK.make_inputs(s, 5, torch.float16))
    assert digest(a) != digest(TASK.make_inputs(s, 6, torch.float16))
    p = s.params
    B, H, Hq, Hkv, D, inter, S = (p[k] for k in ("B", "H", "Hq", "Hkv", "D", "I", "S_max"))
    shapes = {
        "h": (B, H),
        "input_norm": (H,),
        "qkv_proj": ((Hq + 2 * Hkv) * D, H),
        "q_norm": (D,),
        "k_norm": (D,),
        "o_proj": (H, Hq * D),
        "post_attn_norm": (H,),
        "gate_up_proj": (2 * inter, H),
        "down_proj": (H, inter),
        "cos": (S, D // 2),
        "sin": (S, D // 2),
        "positions": (B,),
        "k_cache": (B, Hkv, S, D),
        "v_cache": (B, Hkv, S, D),
        "seq_lens": (B,),
    }
    for name, shape in shapes.items():
        assert tuple(a[name].shape) == shape, name
    assert a["cos"].dtype == torch.float32 and a["positions"].dtype == torch.int32
    assert torch.equal(a["positions"] + 1, a["seq_lens"])
    assert a["seq_lens"].tolist() == list(p["seq_lens"]) and a["max_len"] == S
    assert a["scale"] == D**-0.5 and a["eps"] == 1e-6
    assert TASK.output_spec(a).shape == (B * H + 2 * B * Hkv * D,)


def test_the_cache_holds_large_finite_junk_from_each_token_row_on():
    for s in CPU:
        for dtype in (torch.float32, torch.float16):
            x = TASK.make_inputs(s, 3, dtype)
            for b, n in enumerate(s.params["seq_lens"]):
                for cache in (x["k_cache"], x["v_cache"]):
                    junk, earlier = cache[b, :, n - 1 :].float(), cache[b, :, : n - 1].float()
                    assert bool(torch.isfinite(junk).all()), s.name
                    assert float(junk.abs().min()) >= 10.0, s.name
                    if earlier.numel():
                        assert float(earlier.abs().max()) < 10.0, s.name


def test_perturb_changes_h_in_place_and_nothing_else():
    s = TASK.scenarios("cpu")[1]
    x = TASK.make_inputs(s, 0, torch.float32)
    before = _clone(x)
    pointer = x["h"].data_ptr()
    TASK.perturb(x, 9)
    assert x["h"].data_ptr() == pointer and not torch.equal(x["h"], before["h"])
    for key, value in before.items():
        if key != "h" and isinstance(value, torch.Tensor):
            assert torch.equal(x[key], value), key
    y = _clone(before)
    TASK.perturb(y, 9)
    assert torch.equal(x["h"], y["h"])


# --- the reference -----------------------------------------------------------------------------


def test_reference_is_the_torch_ops_layer_in_float32():
    # An independent composition: OpSet.torch()'s fused ops (ops/compose.py over
    # ops/reference.py), run on float32 inputs, observed as the evaluator observes a call.
    for s in CPU:
        x = TASK.make_inputs(s, 1, torch.float32)
        ref = TASK.reference(x)
        assert ref.dtype == torch.float64 and ref.device.type == "cpu"
        assert ref.shape == TASK.output_spec(x).shape
        y = _clone(x)
        before = {k: y[k].clone() for k in TASK.writes}
        got = TASK.observe(y, layer_task.torch_layer(**y), before)
        assert isinstance(got, torch.Tensor)
        rel_l2, max_abs_rel = errors(got, ref)
        assert rel_l2 < 1e-6 and max_abs_rel < 1e-6, (s.name, rel_l2, max_abs_rel)


def test_reference_reads_no_junk_and_changes_nothing():
    s = TASK.hidden_scenarios("cpu", 0)[2]
    x = TASK.make_inputs(s, 2, torch.float16)
    kept = _clone(x)
    ref = TASK.reference(x)
    assert digest(x) == digest(kept)
    for b, n in enumerate(s.params["seq_lens"]):  # other junk from the token's row on
        x["k_cache"][b, :, n - 1 :] = -3e4
        x["v_cache"][b, :, n - 1 :] = 5e3
    assert torch.equal(TASK.reference(x), ref)


def test_reference_in_float32_is_close_to_float64():
    for s in CPU:
        x = TASK.make_inputs(s, 0, torch.float32)
        exact = layer_task.layer_reference(x, torch.float64)
        rel_l2, max_abs_rel = errors(TASK.reference(x), exact)
        assert rel_l2 < 1e-6 and max_abs_rel < 1e-6, s.name


# --- observe -----------------------------------------------------------------------------------


def _layout(x: dict, out: torch.Tensor) -> torch.Tensor:
    rows = torch.arange(out.shape[0])
    pos = x["positions"].long()
    parts = [out.reshape(-1), x["k_cache"][rows, :, pos].reshape(-1)]
    return torch.cat([*parts, x["v_cache"][rows, :, pos].reshape(-1)])


def test_observe_is_h_then_the_rows_written():
    s = TASK.hidden_scenarios("cpu", 0)[2]
    x = TASK.make_inputs(s, 0, torch.float32)
    before = {k: x[k].clone() for k in TASK.writes}
    out = layer_task.torch_layer(**x)
    got = TASK.observe(x, out, before)
    assert isinstance(got, torch.Tensor) and torch.equal(got, _layout(x, out))
    assert got.shape == TASK.output_spec(x).shape and got.dtype == torch.float32
    assert got.data_ptr() != out.data_ptr()  # a copy: the worker restores h afterwards
    assert torch.equal(TASK.observe(x, out, None), got)  # timing: no before, no write check


def test_observe_rejects_writes_outside_the_token_rows():
    s = TASK.hidden_scenarios("cpu", 0)[2]  # three sequences
    x = TASK.make_inputs(s, 0, torch.float32)
    before = {k: x[k].clone() for k in TASK.writes}
    out = layer_task.torch_layer(**x)
    assert isinstance(TASK.observe(x, out, before), torch.Tensor)
    b = max(range(3), key=lambda i: s.params["seq_lens"][i])
    pos = s.params["seq_lens"][b] - 1
    assert pos > 10
    where = {pos - 1: "offset -1", pos + 1: "offset +1", 0: "row 0", 1: "an earlier row"}
    for name, row in (("k_cache", pos - 1), ("v_cache", pos + 1), ("k_cache", 0), ("v_cache", 1)):
        y = {**x, name: x[name].clone()}
        y[name][b, 1, row, 3] *= -1  # junk may be 1e8: adding 1 would be lost
        line = TASK.observe(y, out, before)
        assert isinstance(line, str) and reason_code(line) == "cache-write", line
        assert name in line and f"sequence {b}, {where[row]}" in line, line
        assert str(pos) not in line  # no (hidden) length given away
    # compared bitwise: NaN where a number was, and -0.0 where 0.0 was, are changes too
    y = {**x, "v_cache": x["v_cache"].clone()}
    y["v_cache"][b, 0, pos - 1, 0] = float("nan")
    assert reason_code(TASK.observe(y, out, before)) == "cache-write"
    zero = {**before, "k_cache": before["k_cache"].clone()}
    zero["k_cache"][b, 0, pos - 1, 0] = 0.0
    y = {**x, "k_cache": x["k_cache"].clone()}
    y["k_cache"][b, 0, pos - 1, 0] = -0.0
    assert reason_code(TASK.observe(y, out, zero)) == "cache-write"
    y["k_cache"][b, 0, pos - 1, 0] = 0.0
    assert isinstance(TASK.observe(y, out, zero), torch.Tensor)


def test_observe_checks_the_returned_tensor():
    s = TASK.scenarios("cpu")[1]
    x = TASK.make_inputs(s, 0, torch.float32)
    h = x["h"]
    cases = [
        ([h], "output-type"),
        (h.numpy(), "output-type"),
        (h[:, :-1], "output-shape"),
        (h.reshape(-1), "output-shape"),
        (h.half(), "output-dtype"),
        (torch.nn.Parameter(h.clone()), "output-type"),
    ]
    for out, code in cases:
        line = TASK.observe(x, out, None)
        assert isinstance(line, str) and reason_code(line) == code, (code, line)


# --- roofline ----------------------------------------------------------------------------------


def test_bytes_and_flops_count_the_weights_and_the_context():
    s = Scenario("x", {**QWEN3_06B.params(), "B": 1, "S_max": 4096, "seq_lens": (4000,)}, "long")
    weights = (32 * 128 * 1024 + 1024 * 2048 + 2 * 3072 * 1024 + 1024 * 3072) + 2 * 1024 + 256
    kv = 2 * 4000 * 8 * 128
    assert TASK.bytes_moved(s, torch.bfloat16) == 2 * (weights + kv + 2 * 1024) + 128 * 4 + 8
    assert TASK.rotating_bytes(s, torch.bfloat16) == 2 * (weights + 2 * 8 * 4096 * 128)
    assert TASK.flops(s) == 2 * weights + 4 * 16 * 128 * 4000
    assert TASK.bytes_moved(s, torch.float32) > 1.9 * TASK.bytes_moved(s, torch.bfloat16)
