"""`evokernel tune`: bad input refused in one line; on the CPU, a real (tiny) search that
writes a pack `generate --kernels` loads, resumed by running tune again."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from pack_files import run_cli, write_hand_pack

from evokernel.cli import main
from evokernel.engine.packs.load import load_pack
from evokernel.model.config import ModelConfig
from evokernel.model.presets import PRESETS
from evokernel.tasks import engine_tasks


def _config(preset: str) -> ModelConfig:
    keys = ModelConfig.__dataclass_fields__
    return ModelConfig(**{k: v for k, v in PRESETS[preset].items() if k in keys})


def test_task_names_follow_the_documented_format() -> None:
    assert engine_tasks(_config("qwen3-0.6b")) == ["decode_layer"]
    assert engine_tasks(_config("qwen3-1.7b")) == ["decode_layer@H2048-Hq16-Hkv8-D128-I6144"]
    assert engine_tasks(_config("tiny")) == ["decode_layer@H64-Hq4-Hkv2-D32-I192"]


def test_help_names_the_flags() -> None:
    with pytest.raises(SystemExit) as exit_, contextlib.redirect_stdout(io.StringIO()) as out:
        main(["tune", "--help"])
    assert exit_.value.code == 0
    text = " ".join(out.getvalue().split())
    for flag in ("--model", "--out", "--budget-minutes", "--iterations", "--device", "--config"):
        assert flag in text
    assert "PACK_DIR/runs/<task>" in text and "--kernels PACK_DIR" in text


def test_bad_input_is_one_line_and_creates_nothing(
    tiny_fp32: Path, tiny_wide: Path, tmp_path: Path
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("islands: [unclosed\n")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("islands:\n  cuont: 2\n")
    (tmp_path / "nockpt").mkdir()
    out = str(tmp_path / "pack")
    model = str(tiny_fp32)
    other = write_hand_pack(tmp_path / "other", ModelConfig.from_dir(tiny_wide))
    cases = [
        (["--model", str(tmp_path / "missing"), "--out", out], "--model: no such directory"),
        (["--model", str(tmp_path / "nockpt"), "--out", out], "config.json"),
        (["--model", model, "--out", str(a_file)], "is a regular file, not a directory"),
        (["--model", model, "--out", str(a_file / "sub")], "lies under"),
        (["--model", model, "--out", out, "--config", str(tmp_path / "no.yaml")], "--config"),
        (["--model", model, "--out", out, "--config", str(tmp_path)], "not a regular file"),
        (["--model", model, "--out", out, "--config", str(bad_yaml)], "not valid YAML"),
        (["--model", model, "--out", out, "--config", str(unknown)], "cuont"),
        (["--model", model, "--out", out, "--iterations", "-1"], "--iterations must be >= 0"),
        (["--model", model, "--out", out, "--iterations", "x"], "expected an integer"),
        (["--model", model, "--out", out, "--budget-minutes", "0"], "--budget-minutes"),
        (["--model", model, "--out", out, "--budget-minutes", "nan"], "--budget-minutes"),
        (
            ["--model", model, "--out", str(other)],
            "is for a model with qwen3 (dense): hidden 64, heads 4:2, head_dim 64",
        ),
    ]
    for argv, message in cases:
        code, _, err = run_cli("tune", *argv, "--device", "cpu")
        assert code == 2, (argv, err)
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, (argv, err)
    assert not (tmp_path / "pack").exists() and not (other / "runs").exists()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU search; the GPU check tunes")
def test_tune_writes_a_pack_that_generate_loads_and_resumes(
    tiny_fp32: Path, tmp_path: Path
) -> None:
    pack = tmp_path / "pack"
    base = ("tune", "--model", str(tiny_fp32), "--out", str(pack), "--device", "cpu")
    # The seed's evaluation only.
    code, out, err = run_cli(*base, "--iterations", "0", "--json")
    assert code == 0, err + out
    task = "decode_layer@H64-Hq4-Hkv2-D32-I192"
    run_dir = pack / "runs" / task
    assert f"new run in {run_dir}" in out
    assert f"wrote {pack / 'pack.json'}" in out and "every bucket keeps the baseline" in out
    record = json.loads(out.splitlines()[-1])
    assert record["pack"] == str(pack) and record["runs"][task]["resumed"] is False
    cfg = ModelConfig.from_dir(tiny_fp32)
    loaded = load_pack(pack, cfg, "cpu", torch.float32)
    table = loaded.tasks[task]
    assert table.op == "decode_layer" and table.run == f"runs/{task}"
    assert [e.max_len for e in table.entries] == [256, 512, 1024, 2048, 4096]
    assert all(e.is_baseline and e.scenario for e in table.entries)  # nothing timed on CPU
    assert loaded.device["name"] == "cpu" and loaded.model["dtype"] == "float32"
    assert (run_dir / "dispatch.json").is_file() and (pack / "programs").is_dir()

    code, out, err = run_cli(
        "generate", "--model", str(tiny_fp32), "--prompt-ids", "1,2,3", "--max-new-tokens", "3",
        "--device", "cpu", "--kernels", str(pack), "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["kernels"] == str(pack)

    # Another configuration cannot change the run.
    other = tmp_path / "other.yaml"
    other.write_text("islands:\n  count: 2\n")
    code, _, err = run_cli(*base, "--iterations", "1", "--config", str(other))
    assert code == 2 and "another configuration" in err and err.count("\n") == 1, err

    # Running tune again resumes the run: a tiny budget still finishes the iteration it starts.
    code, out, err = run_cli(*base, "--budget-minutes", "0.001", "--json")
    assert code == 0, err + out
    assert f"resuming {run_dir}" in out
    record = json.loads(out.splitlines()[-1])
    assert record["runs"][task] == {"run_dir": str(run_dir), "stop_reason": "wall-time",
                                    "resumed": True}  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iterations_done"] >= 1
    load_pack(pack, cfg, "cpu", torch.float32)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU search's stand-in layer")
def test_cpu_tune_says_it_searched_a_stand_in_and_the_pack_records_it(tmp_path: Path) -> None:
    from evokernel.model.random import write_random_checkpoint

    # hidden 512 is beyond what the interpreter runs quickly: the task's CPU scenarios use
    # its stand-in (hidden 128), as they do for Qwen3-0.6B in ./run.sh.
    model = write_random_checkpoint(tmp_path / "m", "tiny", seed=0, dtype="float32", hidden=512)
    pack = tmp_path / "pack"
    code, out, err = run_cli("tune", "--model", str(model), "--out", str(pack), "--device",
                             "cpu", "--iterations", "0")  # fmt: skip
    assert code == 0, err + out
    stand_in = "hidden 128, heads 4:2, head_dim 32, intermediate 192"
    assert f"on the CPU the search runs a stand-in layer ({stand_in}) instead of this " + (
        "checkpoint's (qwen3 (dense): hidden 512, heads 4:2, head_dim 32, intermediate 192)"
    ) in " ".join(out.split())
    assert f"searched at a stand-in layer ({stand_in}), smaller than this checkpoint's" in out
    doc = json.loads((pack / "pack.json").read_text())
    (table,) = doc["tasks"].values()
    assert table["measured"] == {
        "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "intermediate_size": 192, "stand_in": True,
    }  # fmt: skip
    assert doc["model"]["hidden_size"] == 512  # what the pack is for, checked by --kernels
    assert doc["signature"]["scheme"] == "hmac-sha256" and doc["hashes"] == {}


def _tune_process(model: Path, pack: Path, scratch: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, TMPDIR=str(scratch), PYTHONUNBUFFERED="1")
    argv = [sys.executable, "-m", "evokernel", "tune", "--model", str(model), "--out", str(pack),
            "--iterations", "2", "--device", "cpu"]  # fmt: skip
    pipe = subprocess.PIPE
    return subprocess.Popen(argv, env=env, stdout=pipe, stderr=pipe, text=True)


def _interrupt(proc: subprocess.Popen[str], when: str, sig: int) -> tuple[int, str, str]:
    """Send `sig` once a stdout line holds `when`; (exit code, stdout, stderr)."""
    watchdog = threading.Timer(600, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None and proc.stderr is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if when in line:
                proc.send_signal(sig)
                break
        out, err = proc.communicate()
        return proc.returncode, "".join(seen) + out, err
    finally:
        watchdog.cancel()


def _result(pack: Path) -> dict[str, object]:
    """What a finished tune leaves, apart from times: the pack's tables, the run's programs
    and its counts."""
    (run,) = (pack / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    tables = json.loads((pack / "pack.json").read_text())["tasks"]
    programs = {p.name: p.read_text() for p in sorted((run / "programs").iterdir())}
    counts = {k: summary[k] for k in ("iterations_done", "evaluated")}
    return {"tables": tables, "programs": programs, "counts": counts}


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU search")
def test_interrupted_tune_writes_no_pack_and_resumes_to_the_same_result(
    tiny_fp32: Path, tmp_path: Path
) -> None:
    ref = tmp_path / "ref"
    argv = ("tune", "--model", str(tiny_fp32), "--out", str(ref), "--iterations", "2",
            "--device", "cpu")  # fmt: skip
    code, _, err = run_cli(*argv)
    assert code == 0, err
    want = _result(ref)
    # SIGINT (Ctrl-C) as the run starts (its seed not yet evaluated); SIGTERM with one
    # iteration of two done, then resumed by the command it prints.
    for sig, when, exit_code in ((signal.SIGINT, "local backend", 130),
                                 (signal.SIGTERM, "iter 1/2", 143)):  # fmt: skip
        pack, scratch = tmp_path / sig.name, tmp_path / f"tmp-{sig.name}"
        scratch.mkdir()
        code, out, err = _interrupt(_tune_process(tiny_fp32, pack, scratch), when, sig)
        assert code == exit_code, (out, err)
        command = f"evokernel tune --model {tiny_fp32} --out {pack} --iterations 2 --device cpu"
        assert err == (
            f"interrupted ({sig.name}): no pack written; the search in {pack / 'runs'} resumes "
            f"with the same command: {command}\n"
        ), err  # one line: no traceback, no thread's complaint
        assert not (pack / "pack.json").exists()
        assert [p.name for p in scratch.iterdir() if p.name.startswith("evokernel-")] == []
    code, out, err = run_cli(*command.split()[1:])
    assert code == 0, err
    assert "resuming" in out
    assert _result(pack) == {**want, "tables": _with_run(want["tables"], ref, pack)}


def _with_run(tables: object, ref: Path, pack: Path) -> object:
    return json.loads(json.dumps(tables).replace(str(ref), str(pack)))


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU search")
@pytest.mark.parametrize(
    ("preset", "task"),
    [
        ("tiny-llama", "decode_layer@H128-Hq8-Hkv2-D32-I192-noqknorm"),
        ("tiny-qwen2", "decode_layer@H64-Hq4-Hkv2-D32-I160-bias-noqknorm"),
    ],
)
def test_tune_on_each_family_writes_a_pack_verify_accepts(
    preset: str, task: str, tmp_path: Path
) -> None:
    from evokernel.model.random import write_random_checkpoint

    model = write_random_checkpoint(tmp_path / preset, preset, seed=2, dtype="float32")
    pack = tmp_path / "pack"
    code, out, err = run_cli(
        "tune", "--model", str(model), "--out", str(pack), "--device", "cpu",
        "--iterations", "1", "--json",
    )  # fmt: skip
    assert code == 0, err + out
    doc = json.loads((pack / "pack.json").read_text())
    assert task in doc["tasks"] and doc["model"]["model_type"] == preset.removeprefix("tiny-")
    code, out, err = run_cli(
        "verify", "--model", str(model), "--device", "cpu", "--steps", "4",
        "--kernels", str(pack), "--json",
    )  # fmt: skip
    assert code == 0, err + out
    assert json.loads(out.splitlines()[-1])["passed"] is True
    # The pack of one family is refused for another with the same shapes.
    other = write_random_checkpoint(tmp_path / "qwen3", "tiny", seed=2, dtype="float32")
    code, _, err = run_cli(
        "generate", "--model", str(other), "--prompt-ids", "1,2", "--max-new-tokens", "2",
        "--device", "cpu", "--kernels", str(pack),
    )  # fmt: skip
    assert code == 2 and "is for a model with" in err and err.count("\n") == 1
