"""The trust model of kernel packs, through the CLI: a pack's programs run only when this user's
tune signed them (or with --trust-kernels), only as pack.json's hashes name them, only after
the evaluator's static check, and whatever they do at import or at their first call is one
line naming the pack and the program."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from pack_files import LAYER_PROGRAM, WRONG_PROGRAM, run_cli, write_hand_pack

from evokernel.engine.packs.trust import KEY_ENV
from evokernel.model.config import ModelConfig

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the hand-written packs are CPU packs"
)

GENERATE = ("--prompt-ids", "72,105,33,7", "--max-new-tokens", "3", "--ignore-eos")
GENERATE += ("--device", "cpu", "--ops", "torch", "--json")


def _generate(model: Path, pack: Path, *flags: str) -> tuple[int, str, str]:
    return run_cli("generate", "--model", str(model), *GENERATE, "--kernels", str(pack), *flags)


def _one_line(code: int, err: str, *needles: str) -> str:
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def _pack(tmp_path: Path, model: Path, source: str, name: str = "pack", **kw: object) -> Path:
    return write_hand_pack(tmp_path / name, ModelConfig.from_dir(model), {256: source}, **kw)


# A program that passes the static check yet writes a file when imported (the check is the
# first line of defence, not a sandbox): what a hostile pack could do in the user's process.
def _writer(target: Path) -> str:
    return LAYER_PROGRAM + f"\ntorch.zeros(4).numpy().tofile({str(target)!r})\n"


def test_unsigned_pack_is_refused_and_runs_only_with_the_flag(
    tiny_fp32: Path, tmp_path: Path
) -> None:
    target = tmp_path / "written-at-import"
    pack = _pack(tmp_path, tiny_fp32, _writer(target), signed=False)
    code, out, err = _generate(tiny_fp32, pack)
    line = _one_line(code, err, f"kernel pack {pack} is not signed", "--trust-kernels")
    assert "Python code that would run in this process" in line
    assert out == "" and not target.exists()  # nothing of it ran
    # With the flag the user accepts its code: it runs (and so does what it does at import).
    code, out, err = _generate(tiny_fp32, pack, "--trust-kernels")
    assert code == 0, err
    assert target.exists()
    assert f"note: kernel pack {pack} is not signed by this user's key" in err
    assert json.loads(out.splitlines()[-1])["op_origin"]["decode_layer"] == f"pack:{pack}"


def test_static_check_holds_even_with_the_flag(tiny_fp32: Path, tmp_path: Path) -> None:
    target = tmp_path / "opened"
    source = LAYER_PROGRAM + f"\nopen({str(target)!r}, 'w').write('x')\n"
    for signed, flags in ((True, ()), (False, ("--trust-kernels",))):
        pack = _pack(tmp_path, tiny_fp32, source, f"pack-{signed}", signed=signed)
        code, _, err = _generate(tiny_fp32, pack, *flags)
        _one_line(
            code,
            err,
            f"kernel pack {pack}: program programs/layer-256.py fails the evaluator's static "
            "check: static: line",
            "forbidden name 'open'",
        )
    assert not target.exists()


def test_tampered_program_and_edited_hashes_are_refused(tiny_fp32: Path, tmp_path: Path) -> None:
    pack = _pack(tmp_path, tiny_fp32, LAYER_PROGRAM)
    assert _generate(tiny_fp32, pack)[0] == 0  # signed by this user's key: runs
    program = pack / "programs" / "layer-256.py"
    program.write_text(program.read_text() + "\nEXTRA = 1\n")
    for flags in ((), ("--trust-kernels",)):  # a hash mismatch is refused, flag or not
        code, _, err = _generate(tiny_fp32, pack, *flags)
        _one_line(code, err, "program programs/layer-256.py does not match its content hash")
    # Hashes edited to match: the signature no longer checks.
    from evokernel.engine.packs.trust import content_hash

    doc = json.loads((pack / "pack.json").read_text())
    doc["hashes"]["programs/layer-256.py"] = content_hash(program.read_bytes())
    (pack / "pack.json").write_text(json.dumps(doc))
    code, _, err = _generate(tiny_fp32, pack)
    _one_line(code, err, "do not match its signature (pack.json was edited)", "--trust-kernels")
    # A pack written before content hashes: its programs name no hash.
    del doc["hashes"]["programs/layer-256.py"]
    (pack / "pack.json").write_text(json.dumps(doc))
    code, _, err = _generate(tiny_fp32, pack, "--trust-kernels")
    _one_line(code, err, "has no content hash in pack.json", f"evokernel tune --out {pack}")


def test_another_users_key_and_a_bad_key_file(
    tiny_fp32: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pack_key: Path
) -> None:
    pack = _pack(tmp_path, tiny_fp32, LAYER_PROGRAM)  # signed with the session's key
    other = tmp_path / "other-user" / "pack-key"
    monkeypatch.setenv(KEY_ENV, str(other))
    code, _, err = _generate(tiny_fp32, pack)
    _one_line(code, err, "is signed, but this user has no pack key")
    assert not other.exists()  # checking never creates a key
    mine = _pack(tmp_path, tiny_fp32, LAYER_PROGRAM, "mine")  # creates the other user's key
    assert other.exists() and (other.stat().st_mode & 0o777) == 0o600
    code, _, err = _generate(tiny_fp32, pack)
    _one_line(code, err, "is signed with another key")
    assert _generate(tiny_fp32, mine)[0] == 0
    # A key others may read is refused, and so is a FIFO in its place (never opened).
    other.chmod(0o644)
    code, _, err = _generate(tiny_fp32, mine)
    _one_line(code, err, f"pack key {other} may be read or written by others", "chmod 600")
    other.unlink()
    os.mkfifo(other)
    code, _, err = _generate(tiny_fp32, mine)
    _one_line(code, err, f"pack key {other} is not a regular file")


def test_a_pack_without_programs_needs_no_trust(tiny_fp32: Path, tmp_path: Path) -> None:
    pack = write_hand_pack(tmp_path / "plain", ModelConfig.from_dir(tiny_fp32), signed=False)
    code, out, err = _generate(tiny_fp32, pack)
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["kernels"] == str(pack)


LAYER_SIGNATURE = LAYER_PROGRAM[LAYER_PROGRAM.index("def decode_layer(") :].split("):\n")[0]
IMPORT_CASES = {
    "SystemExit(0)": ("raise SystemExit(0)\n", "raised SystemExit(0) at import"),
    "KeyboardInterrupt": ("raise KeyboardInterrupt\n", "raised KeyboardInterrupt at import"),
    "exception": ("1 / 0\n", "raised ZeroDivisionError(division by zero) at import"),
    "no entry point": ("def attention(q):\n    return q\n", "defines no function 'decode_layer'"),
    "not a function": ("decode_layer = 3\n", "defines no function 'decode_layer'"),
    "syntax": ("def decode_layer(:\n", "fails the evaluator's static check: static: line 1"),
}
CALL_CASES = {
    "SystemExit": ("raise SystemExit(3)", "raised SystemExit(3) at its first call"),
    "KeyboardInterrupt": ("raise KeyboardInterrupt", "raised KeyboardInterrupt at its first call"),
    "exception": ("raise ValueError('no')", "raised ValueError(no) at its first call"),
    "wrong shape": ("return h[:, :3]", "returned a wrong output at its first call"),
    "wrong type": ("return h.tolist()", "returned a wrong output at its first call"),
}


@pytest.mark.parametrize("case", sorted(IMPORT_CASES))
def test_what_a_program_does_at_import_is_one_line(
    tiny_fp32: Path, tmp_path: Path, case: str
) -> None:
    source, message = IMPORT_CASES[case]
    pack = _pack(tmp_path, tiny_fp32, source)
    for verb in (
        ("generate", *GENERATE),
        ("verify", "--steps", "2", "--device", "cpu"),
        ("bench", "decode", "--baselines", "evokernel", "--out", str(tmp_path / "b.json"),
         "--positions", "1", "--steps", "2", "--device", "cpu"),
    ):  # fmt: skip
        code, out, err = run_cli(*verb, "--model", str(tiny_fp32), "--kernels", str(pack))
        _one_line(code, err, f"kernel pack {pack}: program programs/layer-256.py", message)
        assert out == ""
    assert not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("case", sorted(CALL_CASES))
def test_what_a_program_does_at_its_first_call_is_one_line(
    tiny_fp32: Path, tmp_path: Path, case: str
) -> None:
    body, message = CALL_CASES[case]
    source = f"import torch\n\n\n{LAYER_SIGNATURE}):\n    {body}\n"
    pack = _pack(tmp_path, tiny_fp32, source)
    for flags in ((), ("--strict-kernels",)):
        code, out, err = _generate(tiny_fp32, pack, *flags)
        _one_line(code, err, f"kernel pack {pack}: program programs/layer-256.py", message)
        assert out == ""


def test_wrong_results_fall_back_per_bucket_or_stop_when_strict(
    tiny_fp32: Path, tmp_path: Path
) -> None:
    cfg = ModelConfig.from_dir(tiny_fp32)
    # bucket 256: the wrong program; bucket 512: a correct one
    pack = write_hand_pack(tmp_path / "pack", cfg, {256: WRONG_PROGRAM, 512: LAYER_PROGRAM})
    plain = run_cli("generate", "--model", str(tiny_fp32), *GENERATE)
    longer = ("--kernels", str(pack), "--max-new-tokens", "300")  # buckets 256 and 512
    code, out, err = run_cli("generate", "--model", str(tiny_fp32), *GENERATE, *longer)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, err
    assert (
        f"kernel pack {pack}: program programs/layer-256.py disagrees with the reference"
        in (warnings[0])
    )
    assert "that bucket runs the engine's layer" in warnings[0]
    assert "self-check of 2 program(s) in 2 bucket(s) against the engine's layer: 1 agree" in err
    # The wrong program never ran for real: the first tokens are the engine's own.
    tokens = json.loads(out.splitlines()[-1])["tokens"]
    assert tokens[:3] == json.loads(plain[1].splitlines()[-1])["tokens"]
    code, out, err = _generate(tiny_fp32, pack, "--strict-kernels")
    _one_line(code, err, "program programs/layer-256.py disagrees", "(strict: not run)")
    # verify's self-check is always strict: the pack fails verification.
    code, out, err = run_cli("verify", "--model", str(tiny_fp32), "--steps", "2", "--device",
                             "cpu", "--kernels", str(pack))  # fmt: skip
    assert code == 1 and "FAIL: kernel pack" in out
    assert err.startswith("verify failed: kernel pack") and err.count("\n") == 1


def test_pack_json_that_is_a_fifo_is_refused_without_hanging(
    tiny_fp32: Path, tmp_path: Path
) -> None:
    pack = write_hand_pack(tmp_path / "pack", ModelConfig.from_dir(tiny_fp32))
    (pack / "pack.json").unlink()
    os.mkfifo(pack / "pack.json")
    code, _, err = _generate(tiny_fp32, pack)  # would block forever if it opened the FIFO
    _one_line(code, err, f"kernel pack {pack}: {pack / 'pack.json'} is a FIFO, not a regular file")
    program = write_hand_pack(tmp_path / "prog", ModelConfig.from_dir(tiny_fp32), {256: "x"})
    (program / "programs" / "layer-256.py").unlink()
    os.mkfifo(program / "programs" / "layer-256.py")
    code, _, err = _generate(tiny_fp32, program)
    _one_line(code, err, "program file programs/layer-256.py is a FIFO, not a regular file")


def test_bench_decode_reuses_the_packs_admission(tiny_fp32: Path, tmp_path: Path) -> None:
    """--trust-kernels reaches the engines bench decode loads from the pack, and the pack's
    self-check runs once for all of them."""
    pack = _pack(tmp_path, tiny_fp32, LAYER_PROGRAM, signed=False)
    out = tmp_path / "bench.json"
    code, _, err = run_cli(
        "bench", "decode", "--model", str(tiny_fp32), "--baselines", "evokernel",
        "--positions", "1", "--steps", "2", "--warmup", "0", "--power-window-ms", "0",
        "--device", "cpu", "--kernels", str(pack), "--trust-kernels", "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert err.count("self-check of 1 program(s)") == 1 and err.count("note: kernel pack") == 1
    doc = json.loads(out.read_text())
    assert all(r["error"] is None for r in doc["results"])
    assert doc["options"]["setup"]["evokernel_pack"]["op_origin"]["decode_layer"] == f"pack:{pack}"
    shutil.rmtree(pack)
