"""On a GPU: a pack's program runs inside the CUDA graph of its context bucket (and only
there), and verify passes with it in bfloat16."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from pack_files import LAYER_PROGRAM, program_calls, run_cli, write_hand_pack

from evokernel.model.config import ModelConfig
from evokernel.model.random import write_random_checkpoint

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def qwen_2layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_random_checkpoint(
        tmp_path_factory.mktemp("q06"), "qwen3-0.6b", seed=0, dtype="bfloat16", layers=2
    )


def test_pack_program_runs_in_its_buckets_graph(qwen_2layers: Path, tmp_path: Path) -> None:
    cfg = ModelConfig.from_dir(qwen_2layers)
    pack = write_hand_pack(
        tmp_path / "pack", cfg, {256: LAYER_PROGRAM}, device="cuda", dtype="bfloat16"
    )
    calls = program_calls(pack, 256)
    argv = ("generate", "--model", str(qwen_2layers), "--prompt-ids", "1,2,3,4",
            "--max-new-tokens", "300", "--ignore-eos", "--ops", "torch", "--json")  # fmt: skip
    code, out, err = run_cli(*argv)
    assert code == 0, err
    plain = json.loads(out.splitlines()[-1])
    calls.clear()
    code, out, err = run_cli(*argv, "--kernels", str(pack))
    assert code == 0, err
    packed = json.loads(out.splitlines()[-1])
    assert packed["cuda_graph"] and packed["op_origin"]["decode_layer"] == f"pack:{pack}"
    # Buckets 256 and 304 (the cache): the program is captured in 256's graph only (and ran
    # once before, at bound 256, in the self-check).
    assert calls and set(calls) == {256}
    assert "self-check of 1 program(s) in 1 bucket(s) against the engine's layer: 1 agree" in err
    assert packed["tokens"] == plain["tokens"]  # the program is the torch ops
    code, out, err = run_cli(
        "verify", "--model", str(qwen_2layers), "--steps", "16", "--kernels", str(pack), "--json"
    )
    assert code == 0, err + out
    assert json.loads(out.splitlines()[-1])["passed"]


def test_a_slower_program_is_sent_back_to_the_baseline(qwen_2layers: Path, tmp_path: Path) -> None:
    """The torch-ops layer in the 256 bucket is slower than the engine's fused layer: timed
    end to end with and without the pack (tune/confirm.py), the bucket goes back to the
    baseline, with the measurement recorded."""
    import torch

    from evokernel.engine.packs.load import load_pack
    from evokernel.tune.confirm import confirm_pack

    cfg = ModelConfig.from_dir(qwen_2layers)
    path = write_hand_pack(
        tmp_path / "pack", cfg, {256: LAYER_PROGRAM}, device="cuda", dtype="bfloat16"
    )
    pack = load_pack(path, cfg, "cuda", torch.bfloat16)
    new = confirm_pack(pack, qwen_2layers, "cuda", io.StringIO())
    first = new.tasks["decode_layer@test"].entries[0]
    assert first.max_len == 256 and first.is_baseline
    assert [c["position"] for c in first.end_to_end] == [1, 256 - 32 - 1]
    assert all(c["ci"][1] < 1.0 for c in first.end_to_end)  # clearly slower, not a tie
    assert list((path / "programs").iterdir()) == []
