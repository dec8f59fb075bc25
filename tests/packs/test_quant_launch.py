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
    assert q["kept"] is False and "not timed on the CPU" in q["rule"]
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


def test_kept_choices_reach_the_kernels_and_change_no_token(
    int8_dir: Path, cpu_pack: Path, tmp_path: Path
) -> None:
    pack = read_pack(cpu_pack)
    assert pack.quantized is not None
    choices = tuple(
        dataclasses.replace(c, mode="magic", warps=2, tile_bytes=4096)
        if c.role == "qkv" else c
        for c in pack.quantized.choices
    )  # fmt: skip
    kept = dataclasses.replace(
        pack, path=tmp_path / "kept",
        quantized=dataclasses.replace(pack.quantized, choices=choices, kept=True),
    )  # fmt: skip
    save_pack(kept, {})
    plain = load_engine(int8_dir, "cpu", None, "triton", max_seq_len=16)
    tuned = load_engine(int8_dir, "cpu", None, "triton", max_seq_len=16, kernels=tmp_path / "kept")
    tuning = tuned.ops.norm_linear.keywords["tuning"]
    assert tuning.quant == tuple(c.entry() for c in choices)
    assert "launches of pack:" in tuned.ops.origin["norm_linear"]
    assert tuned.ops.origin["decode_layer"] == tuned.ops.origin["norm_linear"]
    qkv = tuned.weights.layers[0].qkv_proj
    assert quant.choice(qkv, "norm_linear", tuning) == ("magic", 2, 4096)
    from evokernel.engine.generate import GenerateOptions, generate

    options = GenerateOptions(max_new_tokens=4)
    got, want = (generate(m, [[1, 2, 3, 4]], options) for m in (tuned, plain))
    assert got.tokens == want.tokens


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
