"""Kernel packs as files: the dispatch rule, writing from a run directory, loading and refusing,
and the op that dispatches per context bucket."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from pack_files import LAYER_PROGRAM, WRONG_PROGRAM, edit_pack, program_calls, write_hand_pack

from evokernel.engine.graph import context_buckets
from evokernel.engine.packs.dispatch import packed_ops
from evokernel.engine.packs.format import PackError
from evokernel.engine.packs.load import load_pack, read_pack
from evokernel.model.config import ModelConfig
from evokernel.ops.registry import OpSet
from evokernel.tasks.base import Scenario
from evokernel.tune.write import choose_scenarios, format_pack, write_pack


def _scenario(name: str, ctx: int, B: int = 1, hidden: bool = False) -> Scenario:
    params = {"B": B, "S_max": ctx + ctx // 8 + 1, "seq_lens": (ctx,) * B}
    return Scenario(name, params, "short" if ctx <= 1024 else "long", hidden)


GPU_LIKE = [
    _scenario("b1_ctx2048", 2048),
    _scenario("b1_ctx128", 128),
    _scenario("b1_ctx512", 512),
    _scenario("b1_ctx8192", 8192),
    _scenario("b1_ctx32768", 32768),
    _scenario("hidden_ctx300", 300, hidden=True),
]


def test_rule_smallest_scenario_at_or_above_the_bound_else_the_largest() -> None:
    bounds = context_buckets(40960)  # Qwen3-0.6B's positions: 256 ... 32768, 40960
    assert bounds[0] == 256 and bounds[-2:] == [32768, 40960]
    chosen = [s.name for s in choose_scenarios(bounds, GPU_LIKE)]
    assert dict(zip(bounds, chosen)) == {
        256: "b1_ctx512",
        512: "b1_ctx512",
        1024: "b1_ctx2048",
        2048: "b1_ctx2048",
        4096: "b1_ctx8192",
        8192: "b1_ctx8192",
        16384: "b1_ctx32768",
        32768: "b1_ctx32768",
        40960: "b1_ctx32768",  # beyond every scenario: the largest one's
    }
    mixed = [_scenario("b4_ctx512", 512, B=4), _scenario("b1_ctx512", 512)]
    assert choose_scenarios([100], mixed)[0].name == "b1_ctx512"  # fewer sequences first
    with pytest.raises(PackError, match="no public scenarios"):
        choose_scenarios([256], [_scenario("h", 9, hidden=True)])


def _fake_run(run: Path, task: str, winners: dict[str, tuple[str, list[float]]]) -> Path:
    """A run directory as a finished search leaves it: dispatch.json and programs/<id>.py."""
    (run / "programs").mkdir(parents=True)
    rows = []
    for s in GPU_LIKE:
        if s.hidden:
            continue
        program, ci = winners.get(s.name, ("baseline", []))
        if program != "baseline":
            (run / "programs" / f"{program}.py").write_text(LAYER_PROGRAM)
        rows.append({
            "scenario": s.name, "regime": s.regime, "program": program,
            "file": f"programs/{program}.py" if program != "baseline" else "",
            "baseline": "engine", "speedup": sum(ci) / 2 if ci else None,
            "speedup_ci": ci or None,
        })  # fmt: skip
    doc = {"task": task, "device": "cpu", "rule": "...", "scenarios": rows}
    (run / "dispatch.json").write_text(json.dumps(doc))
    return run


def test_write_pack_from_a_run_follows_the_rule(tmp_path: Path, tiny_fp32: Path) -> None:
    cfg = ModelConfig.from_dir(tiny_fp32)
    task = "decode_layer@tiny"
    winners = {"b1_ctx512": ("p0003", [1.04, 1.1]), "b1_ctx2048": ("p0007", [0.98, 1.2])}
    run = _fake_run(tmp_path / "run", task, winners)
    out = tmp_path / "pack"
    pack = write_pack([run], cfg, out, "cpu", scenarios={task: GPU_LIKE})
    table = pack.tasks[task]
    assert [e.max_len for e in table.entries] == context_buckets(cfg.max_position_embeddings)
    by_bound = {e.max_len: e for e in table.entries}
    # 1..256 is b1_ctx512's bucket by the rule, but b1_ctx128 lies inside it and kept the
    # baseline there: a win is not carried where the run measured otherwise.
    assert by_bound[256].program == "baseline" and by_bound[256].scenario == "b1_ctx512"
    assert by_bound[512].program == "programs/decode_layer@tiny-p0003.py"
    assert by_bound[512].speedup_ci == (1.04, 1.1) and by_bound[512].scenario == "b1_ctx512"
    assert by_bound[1024].program == "baseline"  # p0007's interval reaches below 1
    assert by_bound[4096].program == "baseline"
    assert sorted(p.name for p in (out / "programs").iterdir()) == ["decode_layer@tiny-p0003.py"]
    doc = json.loads((out / "pack.json").read_text())
    assert doc["format"] == "evokernel-pack" and doc["format_version"] == 1
    assert doc["device"]["name"] == "cpu" and doc["software"]["torch"] == torch.__version__
    assert doc["model"] == {
        "model_type": "qwen3", "weights": "dense", "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32, "intermediate_size": 192, "dtype": "float32",
    }  # fmt: skip
    assert doc["tasks"][task]["run"] == str(run.resolve())
    loaded = load_pack(out, cfg, "cpu", torch.float32)
    assert loaded.tasks[task].entries == table.entries
    text = format_pack(loaded)
    assert "p0003" in text and "1.070x [1.040, 1.100]" in text and "baseline" in text
    # The same program winning at ctx 128 too: the 1..256 bucket takes it; another program
    # winning there: the bucket keeps the baseline.
    for at_128, expect in (("p0003", "programs/decode_layer@tiny-p0003.py"), ("p0009", "baseline")):
        both = {**winners, "b1_ctx128": (at_128, [1.01, 1.05])}
        rerun = _fake_run(tmp_path / f"run-{at_128}", task, both)
        got = write_pack(rerun, cfg, tmp_path / f"pack-{at_128}", "cpu", scenarios={task: GPU_LIKE})
        assert got.tasks[task].entries[0].program == expect
    # Written again from a run that no longer wins: the stale program goes.
    (run / "dispatch.json").write_text(json.dumps({"task": task, "device": "cpu", "scenarios": []}))
    again = write_pack(run, cfg, out, "cpu", scenarios={task: GPU_LIKE})
    assert all(e.is_baseline for e in again.tasks[task].entries)
    assert list((out / "programs").iterdir()) == []


def test_write_pack_refuses_unfinished_or_foreign_runs(tmp_path: Path, tiny_fp32: Path) -> None:
    cfg = ModelConfig.from_dir(tiny_fp32)
    (tmp_path / "empty").mkdir()
    with pytest.raises(PackError, match="no dispatch"):
        write_pack(tmp_path / "empty", cfg, tmp_path / "p", "cpu")
    run = _fake_run(tmp_path / "attn", "gqa_decode_attention", {})
    with pytest.raises(PackError, match="which no engine op runs"):
        write_pack(run, cfg, tmp_path / "p", "cpu")


def _refusal(pack: Path, cfg: ModelConfig, dtype: str | None = "float32") -> str:
    with pytest.raises(PackError) as err:
        load_pack(pack, cfg, "cpu", dtype)
    message = str(err.value)
    assert "\n" not in message and str(pack) in message
    return message


def test_load_refuses_packs_that_do_not_belong(tmp_path: Path, tiny_fp32: Path, tiny_wide) -> None:
    cfg = ModelConfig.from_dir(tiny_fp32)
    good = write_hand_pack(tmp_path / "good", cfg, {256: LAYER_PROGRAM})
    assert load_pack(good, cfg, "cpu", "float32").tasks["decode_layer@test"].entries[0].program
    # another model shape
    assert "head_dim 32" in _refusal(good, ModelConfig.from_dir(tiny_wide))
    # another GPU model (and a GPU pack on the CPU)
    h100 = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "capability": "9.0", "driver": None}
    other = write_hand_pack(tmp_path / "gpu", cfg)
    edit_pack(other, device=h100)
    assert "tuned on NVIDIA H100 80GB HBM3" in _refusal(other, cfg)
    # another dtype than the engine's; an unknown dtype
    assert "tuned for float16" in _refusal(
        write_hand_pack(tmp_path / "f16", cfg, dtype="float16"), cfg
    )
    odd = write_hand_pack(tmp_path / "odd", cfg)
    edit_pack(odd, model={**json.loads((odd / "pack.json").read_text())["model"], "dtype": "fp8"})
    assert "unknown dtype 'fp8'" in _refusal(odd, cfg, dtype=None)
    # format
    fmt = write_hand_pack(tmp_path / "fmt", cfg)
    edit_pack(fmt, format_version=2)
    assert "unknown format 'evokernel-pack' version 2" in _refusal(fmt, cfg)
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "pack.json").write_text("{not json")
    assert "not JSON" in _refusal(tmp_path / "json", cfg)
    (tmp_path / "bare").mkdir()
    assert "no pack.json" in _refusal(tmp_path / "bare", cfg)
    assert "no such directory" in _refusal(tmp_path / "absent", cfg)
    # a missing program file; one outside the pack
    gone = write_hand_pack(tmp_path / "gone", cfg, {512: LAYER_PROGRAM})
    (gone / "programs" / "layer-512.py").unlink()
    assert "program file programs/layer-512.py is missing" in _refusal(gone, cfg)
    escape = write_hand_pack(tmp_path / "escape", cfg)
    doc = json.loads((escape / "pack.json").read_text())
    doc["tasks"]["decode_layer@test"]["dispatch"][0]["program"] = "../good/pack.json"
    (escape / "pack.json").write_text(json.dumps(doc))
    assert "lies outside the pack" in _refusal(escape, cfg)
    # bounds that do not ascend
    doc["tasks"]["decode_layer@test"]["dispatch"][0] = {"max_len": 99999, "program": "baseline"}
    (escape / "pack.json").write_text(json.dumps(doc))
    assert "bounds ascend" in _refusal(escape, cfg)


def test_packed_op_runs_each_buckets_program(tmp_path: Path, tiny_fp32: Path) -> None:
    cfg = ModelConfig.from_dir(tiny_fp32)
    # 256 -> the counting program, 512 -> baseline, 1024 -> a wrong program, rest baseline
    pack_dir = write_hand_pack(tmp_path / "pack", cfg, {256: LAYER_PROGRAM, 1024: WRONG_PROGRAM})
    pack = load_pack(pack_dir, cfg, "cpu", "float32")
    ops = packed_ops(OpSet.torch(), pack)
    assert ops.origin["decode_layer"] == f"pack:{pack_dir}"
    layer = ops.decode_layer
    assert [layer.program(b) for b in (1, 256, 300, 512, 1000, 1024, 4096, 10**6)] == [
        "programs/layer-256.py", "programs/layer-256.py", "baseline", "baseline",
        "programs/layer-1024.py", "programs/layer-1024.py", "baseline", "baseline",
    ]  # fmt: skip
    calls = program_calls(pack_dir, 256)
    wrong_calls = program_calls(pack_dir, 1024)
    calls.clear()
    wrong_calls.clear()
    h = torch.randn(1, 64)
    out = layer(h, **_layer_args(cfg), max_len=200)
    assert calls == [200]
    want = OpSet.torch().decode_layer(h.clone(), **_layer_args(cfg), max_len=200)
    assert torch.equal(out, want)
    layer(h.clone(), **_layer_args(cfg), max_len=512)  # baseline: the op set's own layer
    assert calls == [200]
    layer(h.clone(), **_layer_args(cfg), max_len=1024)
    assert calls == [200] and wrong_calls == [1024]  # the wrong program ran for its bucket
    # A pack of baselines only changes nothing.
    plain = write_hand_pack(tmp_path / "plain", cfg)
    same = packed_ops(OpSet.torch(), read_pack(plain))
    assert same.origin["decode_layer"] == "torch"


def _layer_args(cfg: ModelConfig) -> dict:
    """One tiny layer's keyword arguments (the same values on every call), max_len aside."""
    from evokernel.ops.rope import rope_table

    g = torch.Generator().manual_seed(1)
    H, Hq, Hkv, D, inter = 64, cfg.num_attention_heads, cfg.num_key_value_heads, 32, 192
    w = lambda *s: torch.randn(*s, generator=g) * 0.1
    cos, sin = rope_table(D, 1e6, 64, torch.device("cpu"))
    pos = torch.tensor([7], dtype=torch.int32)
    return dict(
        input_norm=1 + w(H), qkv_proj=w((Hq + 2 * Hkv) * D, H), q_norm=1 + w(D),
        k_norm=1 + w(D), o_proj=w(H, Hq * D), post_attn_norm=1 + w(H),
        gate_up_proj=w(2 * inter, H), down_proj=w(H, inter), qkv_bias=None, cos=cos, sin=sin,
        positions=pos, k_cache=w(1, Hkv, 64, D), v_cache=w(1, Hkv, 64, D), seq_lens=pos + 1,
        scale=D**-0.5, eps=1e-6,
    )  # fmt: skip
