"""tune/confirm.py: a program stays in a bucket only where the whole decode step, timed
interleaved with and without the pack, is faster with it; otherwise the bucket goes back to
the baseline, with what was measured recorded in pack.json. Real engines on a tiny CPU
checkpoint; the verdicts come from scripted interval results where a CPU cannot give them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from pack_files import LAYER_PROGRAM, write_hand_pack

from evokernel.bench import paired
from evokernel.engine.graph import context_buckets
from evokernel.engine.packs.load import load_pack
from evokernel.model.config import ModelConfig
from evokernel.tune import confirm
from evokernel.tune.confirm import bucket_positions, confirm_pack


def test_each_bucket_is_checked_at_its_low_and_high_end() -> None:
    pack_entries = load_entries([256, 512, 1024])
    assert bucket_positions(pack_entries, 0, 40960) == [1, 256 - confirm.CONFIRM_STEPS - 1]
    assert bucket_positions(pack_entries, 1, 40960) == [257, 512 - confirm.CONFIRM_STEPS - 1]
    # A last bucket beyond the model's positions is checked up to the model's last position.
    assert bucket_positions(pack_entries, 2, 700)[-1] == 700 - confirm.CONFIRM_STEPS - 1
    # A bucket narrower than the steps: one position, its lowest.
    assert bucket_positions(load_entries([256, 260]), 1, 40960) == [257]


def load_entries(bounds: list[int]) -> tuple[Any, ...]:
    from evokernel.engine.packs.format import BASELINE, PackEntry

    return tuple(PackEntry(b, f"s{b}", b, BASELINE) for b in bounds)


@pytest.fixture
def hand_pack(tiny_fp32: Path, tmp_path: Path) -> Path:
    cfg = ModelConfig.from_dir(tiny_fp32)
    return write_hand_pack(tmp_path / "pack", cfg, {256: LAYER_PROGRAM, 1024: LAYER_PROGRAM})


def test_programs_not_faster_end_to_end_go_back_to_the_baseline(
    tiny_fp32: Path, hand_pack: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = ModelConfig.from_dir(tiny_fp32)
    seen: list[tuple[str, str, int]] = []

    def scripted(a: Any, b: Any, prompt: list[int], plan: Any, device: str, rounds: int) -> dict:
        seen.append((a.name, b.name, plan.position))
        if b.name == "evokernel_control":  # two copies of identical code, in this run
            ci = [0.998, 1.002] if plan.position <= 256 else [0.999, 1.005]
        else:  # the 256 bucket's program clears 1 and the control; the 1024 one's only 1
            ci = [1.01, 1.03] if plan.position <= 256 else [1.002, 1.004]
        return {**paired.pair_entry(a.name, b.name, plan, rounds), "speedup": sum(ci) / 2,
                "ci": ci, "ms_a": 1.0, "ms_b": 1.0}  # fmt: skip

    monkeypatch.setattr(paired, "measure_pair", scripted)
    pack = load_pack(hand_pack, cfg, "cpu", torch.float32)
    new = confirm_pack(pack, tiny_fp32, "cpu")
    low_256, high_256 = bucket_positions(pack.tasks["decode_layer@test"].entries, 0, 10**9)
    assert seen[:4] == [
        ("evokernel", "evokernel_control", low_256), ("evokernel", "evokernel_pack", low_256),
        ("evokernel", "evokernel_control", high_256), ("evokernel", "evokernel_pack", high_256),
    ]  # fmt: skip
    entries = {e.max_len: e for e in new.tasks["decode_layer@test"].entries}
    assert entries[256].program == "programs/layer-256.py"
    assert [c["position"] for c in entries[256].end_to_end] == [low_256, high_256]
    assert entries[256].end_to_end[0]["control_ci"] == [0.998, 1.002]
    # Above 1 but not above what identical code differed by: back to the baseline.
    assert entries[1024].is_baseline and entries[1024].end_to_end[0]["program"] == "p1024"
    assert entries[1024].end_to_end[0]["ci"] == [1.002, 1.004]
    # Rewritten on disk: the demoted program's file is gone, and the pack loads as returned.
    assert sorted(p.name for p in (hand_pack / "programs").iterdir()) == ["layer-256.py"]
    assert load_pack(hand_pack, cfg, "cpu", torch.float32).tasks == new.tasks
    doc = json.loads((hand_pack / "pack.json").read_text())
    table = doc["tasks"]["decode_layer@test"]["dispatch"]
    assert table[0]["end_to_end"][0]["position"] == low_256


def test_confirmation_runs_the_real_engines(
    tiny_fp32: Path, hand_pack: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No scripted timing: both engines load, every programmed bucket is measured at its two
    ends and gets a verdict (on a CPU the verdict itself means nothing; `tune` skips this
    step there)."""
    monkeypatch.setattr(confirm, "CONFIRM_STEPS", 4)
    monkeypatch.setattr(confirm, "CONFIRM_WARMUP", 1)
    monkeypatch.setattr(confirm, "CONFIRM_ROUNDS", 2)
    cfg = ModelConfig.from_dir(tiny_fp32)
    new = confirm_pack(load_pack(hand_pack, cfg, "cpu", torch.float32), tiny_fp32, "cpu")
    bounds = context_buckets(cfg.max_position_embeddings)
    for entry in new.tasks["decode_layer@test"].entries:
        measured = entry.max_len in (256, 1024)
        assert bool(entry.end_to_end) == measured, entry
        for check in entry.end_to_end:
            assert check["speedup"] is not None and check["ci"][0] <= check["speedup"]
            low = bounds[bounds.index(entry.max_len) - 1] if entry.max_len != bounds[0] else 0
            assert low < check["position"] <= entry.max_len
