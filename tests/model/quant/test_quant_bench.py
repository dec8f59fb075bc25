"""`bench decode --quantized`: quantized checkpoints run in the same run as the dense one, each
a system named after its format with its floor from the bytes it reads, the bf16 floor
beside it; gpt-fast's int8 weight-only baseline runs from the dense weights. CPU smoke suite
(no speed claim)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evokernel.bench.decode import SUITES, DecodeBenchOptions, run_decode_bench
from evokernel.bench.results import validate
from evokernel.bench.systems import evokernel as evokernel_system
from evokernel.bench.systems.gptfast_int8 import quantize_per_channel
from evokernel.errors import ConfigError
from evokernel.model.quant.write import QuantizeOptions, write_quantized
from evokernel.model.random import write_random_checkpoint
from evokernel.ops.registry import OpSet

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU smoke suite")


def _options(src: Path, out: Path, quantized: tuple[Path, ...], systems=("evokernel",)):
    assert "smoke" in SUITES
    return DecodeBenchOptions(
        model_dir=src, suite="smoke", systems=systems, positions=(1, 9), steps=2, warmup=1,
        device="cpu", dtype=torch.float32, power_window_ms=0, out=out, command="test",
        quantized=quantized,
    )  # fmt: skip


def test_quantized_systems_report_their_own_and_the_bf16_floor(tmp_path, monkeypatch):
    src = write_random_checkpoint(tmp_path / "src", "tiny", seed=0, dtype="float32")
    i4 = tmp_path / "i4"
    write_quantized(src, i4, QuantizeOptions("int4", head="int8", group_size=32))
    real = evokernel_system.load_engine

    def engine(model_dir, device, dtype, ops, **kw):
        return real(model_dir, device, dtype, OpSet.torch(), **kw)

    monkeypatch.setattr(evokernel_system, "load_engine", engine)
    opts = _options(src, tmp_path / "b.json", (i4,), ("evokernel", "gptfast_int8"))
    doc = run_decode_bench(opts)
    assert validate(doc) == []
    name = "evokernel:gptq-int4-g32+head-int8-g32"
    assert doc["systems"] == ["evokernel", "gptfast_int8", name]
    assert not [r for r in doc["results"] if r["error"]], doc["results"]
    floors = doc["floors"]
    dense = doc["model"]["weight_bytes"]
    assert floors[name]["bf16_weight_bytes"] == dense
    assert 0 < floors[name]["weight_bytes"] < dense / 2  # 4-bit body, 8-bit head, of float32
    assert 0 < floors["gptfast_int8"]["weight_bytes"] < dense / 3
    assert set(floors[name]["pct_bf16_floor"]) == {"1", "9"}
    assert doc["options"]["quantized"][name] == str(i4)


def test_a_quantized_checkpoint_of_another_model_is_refused(tmp_path):
    src = write_random_checkpoint(tmp_path / "src", "tiny", seed=0, dtype="float32")
    other = write_random_checkpoint(tmp_path / "o", "tiny", seed=0, dtype="float32", layers=3)
    write_quantized(other, tmp_path / "q", QuantizeOptions("fp8"))
    with pytest.raises(ConfigError, match="num_hidden_layers is 3, --model's is 2"):
        run_decode_bench(_options(src, tmp_path / "b.json", (tmp_path / "q",)))
    with pytest.raises(ConfigError, match="not a quantized checkpoint"):
        run_decode_bench(_options(src, tmp_path / "b.json", (src,)))


def test_gptfast_int8_quantizes_as_gptfast_does() -> None:
    w = torch.tensor([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [2.0, 1.0, -0.5]])
    q, s = quantize_per_channel(w)
    assert q.dtype == torch.int8 and s.dtype == w.dtype
    assert torch.allclose(s, torch.tensor([1.0 / 127.5, torch.finfo(torch.float32).eps, 2 / 127.5]))
    # -1.0 / float32(1 / 127.5) is -127.4999...: -127, as gpt-fast computes it
    assert q[0].tolist() == [64, -127, 32] and q[2].tolist() == [127, 64, -32]
