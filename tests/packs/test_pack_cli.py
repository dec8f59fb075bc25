"""`--kernels PACK` on generate, verify and bench decode, through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from pack_files import (
    LAYER_PROGRAM,
    WRONG_PROGRAM,
    edit_pack,
    program_calls,
    run_cli,
    write_hand_pack,
)

from evokernel.engine.loading import load_engine
from evokernel.model.config import ModelConfig

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the hand-written packs are CPU packs"
)


@pytest.fixture(scope="module")
def pack(tiny_fp32: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference-ops program in every bucket up to 1024, baseline beyond."""
    cfg = ModelConfig.from_dir(tiny_fp32)
    return write_hand_pack(
        tmp_path_factory.mktemp("pack") / "pack", cfg, {256: LAYER_PROGRAM, 1024: LAYER_PROGRAM}
    )


GENERATE = ("--prompt-ids", "72,105,33,7", "--max-new-tokens", "6", "--ignore-eos")
GENERATE += ("--device", "cpu", "--json")


@pytest.mark.parametrize("ops", ["torch", "triton"])
def test_generate_with_a_pack(tiny_fp32: Path, pack: Path, ops: str) -> None:
    code, out, err = run_cli("generate", "--model", str(tiny_fp32), *GENERATE, "--ops", ops)
    assert code == 0, err
    plain = json.loads(out.splitlines()[-1])
    assert plain["kernels"] is None
    calls = program_calls(pack, 256)
    calls.clear()
    argv = ("generate", "--model", str(tiny_fp32), *GENERATE, "--ops", ops, "--kernels", str(pack))
    code, out, err = run_cli(*argv)
    assert code == 0, err
    packed = json.loads(out.splitlines()[-1])
    assert packed["kernels"] == str(pack) and f"kernels {pack}" in out
    assert packed["op_origin"]["decode_layer"] == f"pack:{pack}"
    # the self-check's call, then 2 layers x 5 decode steps, each with the cache's bound
    # (prompt + new tokens = 10); buckets beyond it are not checked: the engine never runs them
    assert calls == [10] * 11
    assert "self-check of 1 program(s) in 1 bucket(s) against the engine's layer: 1 agree" in err
    if ops == "torch":  # the program is the torch ops: the same tokens, exactly
        assert packed["tokens"] == plain["tokens"]


def test_verify_passes_with_a_pack_and_fails_with_a_wrong_one(
    tiny_fp32: Path, pack: Path, tmp_path: Path
) -> None:
    base = ("verify", "--model", str(tiny_fp32), "--steps", "6", "--device", "cpu", "--json")
    code, out, err = run_cli(*base, "--kernels", str(pack))
    assert code == 0, err + out
    record = json.loads(out.splitlines()[-1])
    assert record["passed"] and record["kernels"] == str(pack)
    assert record["ops"]["decode_layer"] == f"pack:{pack}"
    cfg = ModelConfig.from_dir(tiny_fp32)
    wrong = write_hand_pack(tmp_path / "wrong", cfg, {256: WRONG_PROGRAM})
    code, out, err = run_cli(*base, "--kernels", str(wrong))
    # The self-check finds it before transformers loads: verify's self-check is strict.
    assert code == 1 and err.startswith("verify failed: kernel pack") and err.count("\n") == 1
    assert "program programs/layer-256.py disagrees with the reference" in err


def test_engine_api_takes_a_pack_and_buckets_choose(tiny_fp32: Path, tmp_path: Path) -> None:
    """A cache of 300 positions has buckets 256 and 300: each runs its own entry."""
    cfg = ModelConfig.from_dir(tiny_fp32)
    pack = write_hand_pack(tmp_path / "p", cfg, {256: LAYER_PROGRAM})
    model = load_engine(tiny_fp32, "cpu", None, "torch", kernels=pack)
    from evokernel.engine.graph import DecodeRunner

    cache = model.new_cache(1, 300)
    runner = DecodeRunner(model, cache, use_graph=False, greedy=True)
    calls = program_calls(pack, 256)
    calls.clear()
    for position in (10, 255, 256, 299):  # seq_lens 11, 256 -> bucket 256; 257, 300 -> 300
        runner.start(torch.tensor([3]), torch.tensor([position], dtype=torch.int32))
        runner.step()
    assert calls == [256, 256, 256, 256]  # two layers, two steps in bucket 256; none in 300


def test_refused_packs_are_one_line_and_exit_2(
    tiny_fp32: Path, tiny_wide: Path, tmp_path: Path, pack: Path
) -> None:
    cfg = ModelConfig.from_dir(tiny_fp32)
    gpu = write_hand_pack(tmp_path / "gpu", cfg)
    edit_pack(gpu, device={"kind": "cuda", "name": "NVIDIA H200", "capability": "9.0"})
    fmt = write_hand_pack(tmp_path / "fmt", cfg, format="something-else")
    family = write_hand_pack(tmp_path / "family", cfg)  # the same shapes, another family
    model = json.loads((family / "pack.json").read_text())["model"]
    edit_pack(family, model=model | {"model_type": "llama"})
    cases = [
        (tiny_fp32, family, "is for a model with llama (dense): hidden 64"),
        (tiny_wide, pack, "is for a model with qwen3 (dense): hidden 64, heads 4:2, head_dim 32"),
        (tiny_fp32, gpu, "was tuned on NVIDIA H200"),
        (tiny_fp32, fmt, "unknown format 'something-else'"),
        (tiny_fp32, tmp_path / "nowhere", "--kernels: no such directory"),
    ]
    bench_out = tmp_path / "bench.json"
    for model, bad, message in cases:
        for verb in (
            ("generate", "--prompt-ids", "1,2", "--max-new-tokens", "2"),
            ("verify", "--steps", "2"),
            ("bench", "decode", "--baselines", "evokernel", "--out", str(bench_out)),
        ):
            argv = (*verb, "--model", str(model), "--device", "cpu", "--kernels", str(bad))
            code, out, err = run_cli(*argv)
            assert code == 2, (verb, err, out)
            assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not bench_out.exists()


def test_bench_decode_records_the_pack(tiny_fp32: Path, pack: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    code, _, err = run_cli(
        "bench", "decode", "--model", str(tiny_fp32), "--baselines", "evokernel",
        "--positions", "1,40", "--steps", "2", "--warmup", "0", "--power-window-ms", "0",
        "--device", "cpu", "--kernels", str(pack), "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["options"]["kernels"] == str(pack)
    assert f"--kernels {pack}" in doc["command"]
    # The engine runs with and without the pack in the same run: ratios within one run.
    assert {r["system"] for r in doc["results"]} == {"evokernel", "evokernel_pack"}
    setup = doc["options"]["setup"]["evokernel_pack"]
    assert setup["kernels"] == str(pack)
    assert setup["op_origin"]["decode_layer"] == f"pack:{pack}"
    plain = doc["options"]["setup"]["evokernel"]
    assert plain["kernels"] is None and not plain["op_origin"]["decode_layer"].startswith("pack")
    assert all(r["error"] is None for r in doc["results"])
    # And the two interleaved at each position, next to a control (a second copy of the
    # plain engine): the pack's speedup with an interval, and the floor it must clear.
    got = [(e["position"], e["b"]) for e in doc["paired"]]
    assert got == [(p, b) for p in (1, 40) for b in ("evokernel_pack", "evokernel_control")]
    for e in doc["paired"]:
        assert e["a"] == "evokernel" and e["error"] is None and e["rounds"] == 8
        assert e["ci"][0] <= e["speedup"] <= e["ci"][1]
