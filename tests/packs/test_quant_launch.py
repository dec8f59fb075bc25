"""`tune` on a quantized checkpoint: the packed kernels' launch choices in the pack (not layer
programs, which take dense projections), refused when malformed, and run by the engine only
when the pack keeps them. On the CPU nothing is timed, so tune records the table's choices,
not kept; the GPU search and its end-to-end confirmation run in scripts/gpu_check.sh."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from pack_files import run_cli

from evokernel.engine.loading import load_engine
from evokernel.engine.packs.format import PackError, QuantChoice
from evokernel.engine.packs.load import load_pack, read_pack
from evokernel.model.config import ModelConfig
from evokernel.ops import quant
from evokernel.tasks import engine_tasks
from evokernel.tune import quant as tune_quant
from evokernel.tune.write import format_pack, save_pack

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the CPU tune; the GPU check tunes (quant_check.sh launches)"
)


@pytest.fixture(scope="module")
def int8_dir(tiny_fp32: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tiny` as GPTQ int8 (group 32) with an int8 head, written by `quantize`."""
    out = tmp_path_factory.mktemp("q") / "int8"
    code, _, err = run_cli("quantize", "--model", str(tiny_fp32), "--out", str(out),
                           "--format", "int8", "--group-size", "32", "--head", "int8")  # fmt: skip
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def cpu_pack(int8_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    pack = tmp_path_factory.mktemp("packs") / "int8"
    code, _, err = run_cli("tune", "--model", str(int8_dir), "--out", str(pack), "--device",
                             "cpu", "--json")  # fmt: skip
    assert code == 0, err
    return pack


def test_tune_on_a_quantized_checkpoint_records_its_launches_not_programs(
    int8_dir: Path, cpu_pack: Path
) -> None:
    assert engine_tasks(ModelConfig.from_dir(int8_dir)) == []
    doc = json.loads((cpu_pack / "pack.json").read_text())
    assert doc["tasks"] == {} and not (cpu_pack / "runs").exists()
    q = doc["quantized"]
    assert q["kept"] is False and "not timed on the CPU" in q["rule"] and q["dispatch"] == []
    assert {c["source"] for c in q["choices"]} == {"table"}
    roles = {c["role"]: c for c in q["choices"]}
    assert set(roles) == {"qkv", "o_proj", "gate_up", "down", "head"}
    cfg = ModelConfig.from_dir(int8_dir)
    assert (roles["down"]["op"], roles["down"]["k"]) == ("linear_residual", cfg.intermediate_size)
    pack = load_pack(cpu_pack, cfg, "cpu")
    weights = load_engine(int8_dir, "cpu", None, "torch", max_seq_len=8).weights
    for role in tune_quant.roles(weights):  # the table's own choice, recorded
        assert roles[role.name]["mode"] == quant.choice(role.weight, role.op)[0]
    text = format_pack(pack)
    assert "not run (the table's choices stay)" in text and "linear_residual" in text
    code, _, err = run_cli("generate", "--model", str(int8_dir), "--prompt-ids", "1,2,3",
                           "--max-new-tokens", "2", "--kernels", str(cpu_pack), "--device",
                           "cpu")  # fmt: skip
    assert code == 0, err


def test_kept_choices_reach_the_kernels_of_their_buckets_and_change_no_token(
    int8_dir: Path, cpu_pack: Path, tmp_path: Path
) -> None:
    from evokernel.engine.generate import GenerateOptions, generate
    from evokernel.engine.graph import context_buckets

    pack = read_pack(cpu_pack)
    assert pack.quantized is not None and pack.quantized.dispatch == ()
    table = pack.quantized.choices
    qkv = next(c for c in table if c.role == "qkv")
    head = next(c for c in table if c.role == "head")
    faster_qkv = dataclasses.replace(qkv, mode="magic", warps=2, tile_bytes=4096, source="x")
    faster_head = dataclasses.replace(head, mode="early", warps=8, source="x")
    choices = (*table, faster_qkv, faster_head)
    n = len(table)
    bounds = context_buckets(ModelConfig.from_dir(int8_dir).max_position_embeddings)
    # qkv's setting in the first bucket only; the head's everywhere (it is not per bucket)
    dispatch = tuple((b, (n, n + 1) if i == 0 else (n + 1,)) for i, b in enumerate(bounds))
    launch = dataclasses.replace(pack.quantized, choices=choices, kept=True, dispatch=dispatch)
    save_pack(dataclasses.replace(pack, path=tmp_path / "kept", quantized=launch), {})
    assert read_pack(tmp_path / "kept").quantized == launch  # written and read back as is
    plain = load_engine(int8_dir, "cpu", None, "triton", max_seq_len=16)
    tuned = load_engine(int8_dir, "cpu", None, "triton", max_seq_len=16, kernels=tmp_path / "kept")

    def tuning_of(layer_fn):  # decode_layer composed of an OpSet's fused ops (ops/compose.py)
        return layer_fn.args[0].norm_linear.keywords["tuning"]

    first = tuning_of(tuned.ops.decode_layer.choose(bounds[0]))
    later = tuning_of(tuned.ops.decode_layer.choose(bounds[0] + 1))
    assert first.quant == (faster_qkv.entry(), faster_head.entry())
    assert later.quant == (faster_head.entry(),)
    assert tuned.ops.greedy_head.keywords["tuning"].quant == (faster_head.entry(),)
    assert "launches of pack:" in tuned.ops.origin["decode_layer"]
    w = tuned.weights.layers[0].qkv_proj
    assert quant.choice(w, "norm_linear", first) == ("magic", 2, 4096)
    assert quant.choice(w, "norm_linear", later) == quant.choice(w, "norm_linear")
    options = GenerateOptions(max_new_tokens=4)
    got, want = (generate(m, [[1, 2, 3, 4]], options) for m in (tuned, plain))
    assert got.tokens == want.tokens
    assert format_pack(read_pack(tmp_path / "kept")).count("#") >= len(choices)


def test_a_malformed_or_unknown_launch_is_refused_in_one_line(
    int8_dir: Path, cpu_pack: Path, tmp_path: Path
) -> None:
    cfg = ModelConfig.from_dir(int8_dir)
    doc = json.loads((cpu_pack / "pack.json").read_text())
    cases = {
        "mode": (lambda c: c.update(mode="fastest"), "is not a launch this evokernel has"),
        "warps": (lambda c: c.update(warps=3), "is not a launch this evokernel has"),
        "tile": (lambda c: c.update(tile_bytes=3000), "is not a launch this evokernel has"),
        "k": (lambda c: c.update(k="1024"), "is malformed"),
        "missing": (lambda c: c.pop("op"), "is malformed"),
    }
    for name, (edit, words) in cases.items():
        bad = json.loads(json.dumps(doc))
        edit(bad["quantized"]["choices"][0])
        where = tmp_path / name
        where.mkdir()
        (where / "pack.json").write_text(json.dumps(bad))
        with pytest.raises(PackError) as err:
            load_pack(where, cfg, "cpu")
        assert words in str(err.value) and "\n" not in str(err.value), name
    for name, rows in {"order": [{"max_len": 512, "choices": []}, {"max_len": 256, "choices": []}],
                       "index": [{"max_len": 256, "choices": [99]}]}.items():  # fmt: skip
        bad = json.loads(json.dumps(doc))
        bad["quantized"]["dispatch"] = rows
        (tmp_path / name).mkdir()
        (tmp_path / name / "pack.json").write_text(json.dumps(bad))
        with pytest.raises(PackError, match="is malformed or out of order"):
            load_pack(tmp_path / name, cfg, "cpu")
    bad = json.loads(json.dumps(doc))
    bad["quantized"] = {"choices": []}
    (tmp_path / "nokept").mkdir()
    (tmp_path / "nokept" / "pack.json").write_text(json.dumps(bad))
    with pytest.raises(PackError, match="boolean 'kept'"):
        load_pack(tmp_path / "nokept", cfg, "cpu")


def test_the_search_space_is_coordinate_wise_and_skips_the_known_bad_region(
    int8_dir: Path,
) -> None:
    weights = load_engine(int8_dir, "cpu", None, "torch", max_seq_len=8).weights
    by_name = {r.name: r for r in tune_quant.roles(weights)}
    head, qkv = by_name["head"], by_name["qkv"]
    assert [s[0] for s in tune_quant.settings(qkv, "convert", 0, "mode")] == list(
        quant.modes(qkv.weight, "norm_linear"))  # fmt: skip
    assert {s[1] for s in tune_quant.settings(qkv, "early", 8, "warps")} == {0, 4, 8}
    assert [s[2] for s in tune_quant.settings(head, "convert", 4, "tile")] == list(
        quant.HEAD_TILES)  # fmt: skip
    assert QuantChoice("qkv", *qkv.key, "early", 0, 0).entry()[:3] == qkv.key


def _check(speedup: float, lo: float, hi: float, control=(0.998, 1.002)) -> dict:
    return {"speedup": speedup, "ci": [lo, hi], "control_ci": list(control), "error": None}


def test_each_bucket_takes_per_role_the_setting_faster_alone_there_by_the_most() -> None:
    def c(role: str, op: str, mode: str) -> QuantChoice:
        return QuantChoice(role, "int4", op, 1024, mode, 0, 0, source="step search")

    choices = (c("qkv", "norm_linear", "magic"), c("qkv", "norm_linear", "early"),
               c("down", "linear_residual", "convert"), c("head", "head", "magic"))  # fmt: skip
    fast, same, slow = _check(1.05, 1.04, 1.06), _check(1.0, 0.999, 1.001), _check(0.97, 0.96, 0.98)
    alone = {
        0: [fast, slow],  # qkv magic: faster in bucket 0 only
        1: [_check(1.08, 1.07, 1.09), same],  # qkv early: faster still in bucket 0
        2: [fast, fast],  # down: faster in both
        3: [fast, slow],  # the head: slower in one bucket, so in none (`_head_choice`)
    }
    rows = tune_quant._per_bucket(choices, [0, 1, 2, 3], alone, 2)
    assert rows == [[1, 2], [2]]
    assert tune_quant._per_bucket(choices, [0, 1, 2, 3], alone, 2, most=1) == [[1], [2]]
    assert tune_quant._head_choice(choices, [0, 1, 2, 3], alone) == []  # slower in one bucket
    alone[3] = [fast, same]  # faster somewhere, slower nowhere: in every bucket
    assert tune_quant._head_choice(choices, [0, 1, 2, 3], alone) == [3]
    # an error or an interval inside the control's is not "faster"
    alone = {0: [dict(fast, error="x")], 1: [_check(1.001, 1.0005, 1.002)], 2: [same], 3: [same]}
    assert tune_quant._per_bucket(choices, [0, 1, 2, 3], alone, 1) == [[]]


def test_bench_decode_runs_a_quantized_checkpoint_with_its_pack_beside_it(
    tiny_fp32: Path, int8_dir: Path, cpu_pack: Path, tmp_path: Path, monkeypatch
) -> None:
    from evokernel.bench.decode import DecodeBenchOptions, run_decode_bench
    from evokernel.bench.systems import evokernel as evokernel_system
    from evokernel.errors import ConfigError
    from evokernel.ops.registry import OpSet

    real = evokernel_system.load_engine
    seen = []

    def engine(model_dir, device, dtype, ops, **kw):  # the torch ops: a CPU smoke run
        seen.append((Path(model_dir), kw.get("kernels")))
        return real(model_dir, device, dtype, OpSet.torch(), **kw)

    monkeypatch.setattr(evokernel_system, "load_engine", engine)

    def options(packs: tuple[Path, ...]) -> DecodeBenchOptions:
        return DecodeBenchOptions(
            model_dir=tiny_fp32, suite="smoke", systems=("evokernel",), positions=(1,), steps=2,
            warmup=1, device="cpu", dtype=torch.float32, power_window_ms=0,
            out=tmp_path / "b.json", command="test", quantized=(int8_dir,),
            quantized_kernels=packs,
        )  # fmt: skip

    doc = run_decode_bench(options((cpu_pack,)))
    name = "evokernel:gptq-int8-g32+head-int8-g32"
    assert doc["systems"] == ["evokernel", name, f"{name}+pack"]
    assert doc["options"]["quantized_kernels"] == {f"{name}+pack": str(cpu_pack)}
    assert not [r for r in doc["results"] if r["error"]], doc["results"]
    assert (int8_dir, None) in seen and (int8_dir, cpu_pack) in seen  # the pack: its system's
    assert (tiny_fp32, None) in seen
    with pytest.raises(ConfigError, match="fits no --quantized checkpoint"):
        run_decode_bench(options((cpu_pack, tmp_path)))


def test_nothing_proposed_means_nothing_to_confirm(int8_dir: Path, cpu_pack: Path) -> None:
    pack = read_pack(cpu_pack)  # the table's settings only: no engine is loaded, no GPU needed
    assert tune_quant.confirm_launch(pack, int8_dir, "cuda") is pack


class _FakeBench:
    """A bench on which the "magic" mode wins (the step search's interface, no GPU)."""

    def __init__(self) -> None:
        self.tried: list[tuple] = []

    def prepare(self, role, tables, setting):
        self.tried.append(setting)
        return setting

    def time(self, trial) -> float:
        return 1.0 if trial[0] == "magic" else 2.0

    def better(self, incumbent, trial) -> bool:
        return self.time(trial) < self.time(incumbent)


def test_the_launch_sweep_stops_at_the_budget(int8_dir: Path, cpu_pack: Path) -> None:
    """No setting is tried past the deadline; roles not reached keep the table's setting, and
    a confirmation past it keeps nothing (without loading anything on "cuda")."""
    import io
    import time

    weights = load_engine(int8_dir, "cpu", None, "torch", max_seq_len=8).weights
    found = tune_quant.roles(weights)
    out = io.StringIO()
    bench = _FakeBench()
    searched = tune_quant._search_roles(found, (("step search", bench),), out, None)
    assert len(bench.tried) > len(found) and any(c.source == "step search" for c in searched)
    bench = _FakeBench()
    spent = time.monotonic() - 1
    kept = tune_quant._search_roles(found, (("step search", bench),), out, spent)
    assert bench.tried == [] and all(c.source == "table" for c in kept)
    assert len(kept) == len(found) and "not searched" in out.getvalue()
    # one role's search cut short: its incumbent (the table's) is the only one prepared
    bench = _FakeBench()
    tables = {r.key: tune_quant.table_choice(r) for r in found}
    best, _, _ = tune_quant._coordinate(bench, found[0], tables, out, spent)
    assert best == tables[found[0].key] and len(bench.tried) == 1
    pack = read_pack(cpu_pack)
    assert pack.quantized is not None
    pack = dataclasses.replace(
        pack, quantized=dataclasses.replace(pack.quantized, choices=tuple(searched))
    )
    assert tune_quant.confirm_launch(pack, int8_dir, "cuda", out, spent) is pack
    assert "budget was spent before their confirmation" in out.getvalue()
