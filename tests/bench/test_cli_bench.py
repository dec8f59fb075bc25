"""`evokernel bench decode` through the real entry point, on a real random tiny checkpoint.

On a CPU this is the labelled smoke suite: our engine (torch ops), the gpt-fast-style model and
transformers' static-cache path (both compiled by Dynamo with the eager backend) and
transformers eager, at three context positions with three different cache lengths.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from evokernel.bench import decode
from evokernel.bench.floor import kv_bytes_per_token, weight_bytes
from evokernel.bench.results import validate
from evokernel.cli import main
from evokernel.model.config import ModelConfig

pytestmark = pytest.mark.slow

SYSTEMS = ["evokernel", "gptfast", "hf_eager", "hf_compile"]


def _main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _strict_json(text: str) -> Any:
    def no_constants(name: str) -> Any:
        raise AssertionError(f"{name} in JSON")

    return json.loads(text, parse_constant=no_constants)


@pytest.fixture(scope="module")
def smoke(tiny_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if torch.cuda.is_available():
        pytest.skip("the CPU smoke suite runs where there is no GPU")
    out = tmp_path_factory.mktemp("smoke") / "smoke.json"
    code, stdout, stderr = _main("bench", "decode", "--model", str(tiny_ckpt), "--out", str(out))
    doc = _strict_json(out.read_text())
    return {"code": code, "stdout": stdout, "stderr": stderr, "doc": doc, "path": out}


def test_cpu_smoke_writes_a_complete_labelled_result_file(smoke: dict[str, Any]) -> None:
    assert smoke["code"] == 0, smoke["stderr"]
    doc = smoke["doc"]
    assert validate(doc) == []
    assert doc["suite"] == "smoke" and "no speed claim" in doc["label"]
    assert doc["env"]["device"] == "cpu" and doc["env"]["gpu"] is None
    assert doc["systems"] == SYSTEMS and "vllm" in doc["skipped"]
    positions = doc["options"]["positions"]
    assert positions == [1, 128, 320]
    assert [(r["system"], r["position"]) for r in doc["results"]] == [
        (s, p) for s in SYSTEMS for p in positions
    ]
    assert all(r["error"] is None for r in doc["results"]), doc["results"]
    progress = [line for line in smoke["stderr"].splitlines() if " position " in line]
    assert len(progress) == len(SYSTEMS) * len(positions)


def test_stdout_is_a_table_then_one_json_summary(smoke: dict[str, Any]) -> None:
    lines = smoke["stdout"].strip().splitlines()
    summary = _strict_json(lines[-1])
    assert summary["out"] == str(smoke["path"])
    assert summary["csv"] == str(smoke["path"].with_suffix(".csv"))
    assert summary["rows"] == 12 and summary["errors"] == 0 and "results" not in summary
    assert summary["tok_s"]["gptfast"]["128"] == smoke["doc"]["results"][4]["tok_s"]
    assert any(line.startswith("hf_compile") and " 320 " in line for line in lines)


def test_figures_follow_from_the_step_times_and_the_floor(
    smoke: dict[str, Any], tiny_ckpt: Path
) -> None:
    doc = smoke["doc"]
    cfg = ModelConfig.from_dir(tiny_ckpt)
    model, copy_gbps = doc["model"], doc["env"]["copy_gbps"]
    assert model["dtype"] == "float32"
    assert model["weight_bytes"] == weight_bytes(cfg, 4)
    assert model["kv_bytes_per_token"] == kv_bytes_per_token(cfg, 4) == 2 * 2 * 2 * 32 * 4
    for r in doc["results"]:
        floor = (model["weight_bytes"] + model["kv_bytes_per_token"] * r["position"]) / (
            copy_gbps * 1e9
        )
        assert r["floor_ms"] == pytest.approx(floor * 1e3, rel=1e-5)
        assert r["pct_floor"] == pytest.approx(100 * r["floor_ms"] / r["ms_p50"], rel=1e-4)
        assert r["tok_s"] == pytest.approx(1e3 / r["ms_p50"], rel=1e-4)
        assert 0 < r["ms_p50"] <= r["ms_p95"] <= r["ms_p99"]
        assert r["steps"] == 8 and r["ttft_ms"] > 0 and r["power_w"] is None
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float))


def test_compiled_baselines_compile_once_for_every_cache_length(smoke: dict[str, Any]) -> None:
    options = smoke["doc"]["options"]
    for name in ("gptfast", "hf_compile", "evokernel"):
        assert options["cache_len"][name] == {"1": 128, "128": 256, "320": 384}
    assert options["cache_len"]["hf_eager"] == {"1": None, "128": None, "320": None}
    assert options["setup"]["gptfast"]["graphs_compiled"] == 1
    assert options["setup"]["hf_compile"]["graphs_compiled"] == 1


def test_csv_holds_the_json_rows(smoke: dict[str, Any]) -> None:
    with smoke["path"].with_suffix(".csv").open() as fh:
        rows = list(csv.DictReader(fh))
    results = smoke["doc"]["results"]
    assert len(rows) == len(results)
    for row, r in zip(rows, results):
        assert row["system"] == r["system"] and int(row["position"]) == r["position"]
        assert float(row["tok_s"]) == r["tok_s"] and row["power_w"] == "" and row["error"] == ""


def test_compare_prints_b_over_a(smoke: dict[str, Any], tmp_path: Path) -> None:
    faster = copy.deepcopy(smoke["doc"])
    for r in faster["results"]:
        if r["system"] == "evokernel":
            r["tok_s"] *= 2
    b = tmp_path / "b.json"
    b.write_text(json.dumps(faster))
    code, out, _ = _main("bench", "decode", "--compare", str(smoke["path"]), str(b))
    assert code == 0
    ratios = {
        (r["system"], r["position"]): r["ratio"]
        for r in _strict_json(out.splitlines()[-1])["ratios"]
    }
    assert len(ratios) == 12
    assert all(v == pytest.approx(2.0 if s == "evokernel" else 1.0) for (s, _), v in ratios.items())


@pytest.mark.parametrize(("key", "value"), [("gpu", "NVIDIA H200"), ("device", "cuda")])
def test_compare_refuses_files_of_other_hardware(
    smoke: dict[str, Any], tmp_path: Path, key: str, value: str
) -> None:
    other = copy.deepcopy(smoke["doc"])
    other["env"][key] = value
    b = tmp_path / "other.json"
    b.write_text(json.dumps(other))
    code, out, err = _main("bench", "decode", "--compare", str(smoke["path"]), str(b))
    assert code == 2 and out == ""
    assert (
        err.startswith("error: cannot compare runs on different hardware") and err.count("\n") == 1
    )


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d.update(env=None),
        lambda d: d.update(model=[]),
        lambda d: d.update(options=None),
        lambda d: d.update(systems="evokernel"),
        lambda d: d.update(results=None),
        lambda d: d["results"].__setitem__(0, None),
        lambda d: d["results"][0].update(position=[1]),
        lambda d: d["options"].update(positions=None),
    ],
    ids=["env", "model", "options", "systems", "results", "row", "position", "positions"],
)
def test_a_damaged_result_file_is_refused_in_one_line(
    smoke: dict[str, Any], tmp_path: Path, damage: Any
) -> None:
    doc = copy.deepcopy(smoke["doc"])
    damage(doc)
    assert validate(doc) != []
    bad = tmp_path / "damaged.json"
    bad.write_text(json.dumps(doc))
    code, out, err = _main("bench", "decode", "--compare", str(smoke["path"]), str(bad))
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err


def test_bad_input_is_one_line(tiny_ckpt: Path, tmp_path: Path) -> None:
    junk = tmp_path / "junk.json"
    junk.write_text('{"kind": "something-else"}')
    model = ["bench", "decode", "--model", str(tiny_ckpt)]
    cases = [
        (["bench", "decode"], "needs --model"),
        ([*model, "--baselines", "evokernel,tgi"], "unknown system 'tgi'"),
        ([*model, "--positions", "0,5"], "must be >= 1"),
        ([*model, "--positions", "1,5000"], "exceeds the model's 4096 positions"),
        ([*model, "--out", str(tmp_path / "r.txt")], "must name a .json file"),
        (["bench", "decode", "--compare", str(junk), str(junk)], "not a bench decode result"),
        (["bench", "decode", "--compare", str(tmp_path / "none.json"), str(junk)], "no such file"),
    ]
    for argv, message in cases:
        code, _, err = _main(*argv)
        assert code == 2, argv
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, err


def test_a_failing_system_leaves_error_rows_and_the_run_goes_on(
    tiny_ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_load = decode.load_system

    def load(name: str, *args: Any) -> Any:
        if name == "gptfast":
            raise RuntimeError("compile failed\nwith a long trace")
        system = real_load(name, *args)
        real_open = system.open

        def open_or_oom(prompt: list[int], need: int) -> Any:
            if len(prompt) == 128:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return real_open(prompt, need)

        system.open = open_or_oom  # type: ignore[method-assign]
        return system

    monkeypatch.setattr(decode, "load_system", load)
    out = tmp_path / "r.json"
    argv = ["bench", "decode", "--model", str(tiny_ckpt), "--baselines", "hf_eager,gptfast",
            "--positions", "1,128", "--steps", "3", "--out", str(out)]  # fmt: skip
    code, _, _ = _main(*argv)
    assert code == 0
    doc = _strict_json(out.read_text())
    assert validate(doc) == []
    errors = {(r["system"], r["position"]): r["error"] for r in doc["results"]}
    assert errors[("hf_eager", 1)] is None
    assert errors[("hf_eager", 128)] == (
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    load_error = "load failed: RuntimeError: compile failed"
    assert errors[("gptfast", 1)] == errors[("gptfast", 128)] == load_error


def test_a_spent_time_budget_leaves_every_row_not_run(tiny_ckpt: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    code, _, _ = _main("bench", "decode", "--model", str(tiny_ckpt), "--max-minutes", "1e-9",
                       "--baselines", "evokernel,hf_eager", "--out", str(out))  # fmt: skip
    assert code == 0
    doc = _strict_json(out.read_text())
    assert validate(doc) == [] and len(doc["results"]) == 6
    assert all(r["error"] == "not run: --max-minutes 1e-09 reached" for r in doc["results"])
