"""`evokernel model random` and `evokernel model info`, through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evokernel.cli import main
from evokernel.model.loader import load_model


def _json_line(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_random_then_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "m"
    code = main(["model", "random", str(out_dir), "--preset", "tiny", "--seed", "4", "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert out.startswith(f"wrote {out_dir}: preset tiny, seed 4")
    written = _json_line(out)
    assert written["seed"] == 4 and written["num_hidden_layers"] == 2

    assert main(["model", "info", str(out_dir), "--json"]) == 0
    out, _ = capsys.readouterr()
    info = _json_line(out)
    cfg, w = load_model(out_dir, "cpu", torch.float32)
    layer_tensors = [t for layer in w.layers for t in vars(layer).values() if t is not None]
    assert info["num_parameters"] == sum(
        t.numel() for t in [w.embed_tokens, w.final_norm, *layer_tensors]
    )
    assert info["weight_bytes"] == 2 * info["num_parameters"]  # bf16 on disk
    assert info["lm_head"] == "tied" and info["shards"] == ["model.safetensors"]
    assert info["eos_token_ids"] == [258, 256] and info["tokenizer"] is True
    assert info["gqa_ratio"] == cfg.gqa_ratio == 2
    text = out.splitlines()
    assert text[0] == f"checkpoint  {out_dir}"
    assert "4 q heads, 2 kv heads (GQA 2:1), head_dim 32" in out


def test_random_shape_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["model", "random", str(tmp_path), "--preset", "tiny", "--layers", "3"]
    args += ["--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--untied", "--shards", "2"]
    args += ["--dtype", "float16", "--config-layout", "legacy", "--no-tokenizer", "--json"]
    assert main(args) == 0
    info = _json_line(capsys.readouterr().out)
    assert (info["num_hidden_layers"], info["num_attention_heads"]) == (3, 8)
    assert (info["num_key_value_heads"], info["head_dim"], info["gqa_ratio"]) == (2, 16, 4)
    assert info["lm_head"] == "untied" and len(info["shards"]) == 2
    assert info["disk_dtypes"] == {"F16": 3 * 11 + 3} and info["tokenizer"] is False
    assert "rope_theta" in json.loads((tmp_path / "config.json").read_text())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kv-heads", "3"], "error: preset 'tiny': num_attention_heads (4) is not a multiple"),
        (["--vocab", "100"], "error: vocab_size must be at least 259"),
        (["--shards", "0"], "error: --shards must be >= 1, got 0"),
    ],
)
def test_random_bad_flags_one_line(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["model", "random", str(tmp_path / "x"), "--preset", "tiny", *args])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.strip().splitlines() == [err.strip()] and err.startswith(message)


def test_help_lists_the_contract_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["model", "random", "--help"])
    out = capsys.readouterr().out
    for flag in ("OUT_DIR", "--preset", "qwen3-0.6b", "tiny", "--seed", "--shards", "--untied"):
        assert flag in out


def test_console_script_runs_in_a_fresh_process(tmp_path: Path) -> None:
    assert main(["model", "random", str(tmp_path), "--preset", "tiny"]) == 0
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 3)
    cmd = [sys.executable, "-m", "evokernel", "model", "info", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"error: {tmp_path / 'model.safetensors'}: truncated safetensors file "
        "(3 bytes, no 8-byte header length)"
    )
