"""The first run explains itself: generate says when the text it made has nothing printable
(a random checkpoint's usually has not) and shows the token ids; ./run.sh says what each step
does, prints a line at least every EVOKERNEL_TICK_S seconds while a step works quietly, and
ends naming `evokernel report` and the files it wrote."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from evokernel.cli import main
from evokernel.cli.generate import shown_text

ROOT = Path(__file__).resolve().parents[2]


def test_unprintable_text_is_shown_with_a_note_and_the_ids(
    tiny_fp32: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["generate", "--model", str(tiny_fp32), "--prompt", "hello", "--max-new-tokens", "8",
            "--ignore-eos", "--device", "cpu", "--json"]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    tokens = json.loads(lines[-1])["tokens"]
    # The tiny random checkpoint answers "hello" with control bytes (two form feeds).
    assert lines[0] == (
        '"\\x0c\\x0c" (note: the 8 new tokens decode to no printable text, as a random-weight '
        f"checkpoint's usually do; token ids: {' '.join(map(str, tokens))})"
    )


def test_shown_text_escapes_control_characters() -> None:
    assert shown_text("hello\x1b[2Jworld", [1]) == "hello\\x1b[2Jworld"  # no terminal escapes
    assert shown_text("two\nlines\t", [1]) == "two\nlines\t"
    assert shown_text(None, [4, 5]) == "4 5"  # no tokenizer: the ids
    assert shown_text("", []) == "(no new tokens)"
    assert shown_text("\u200b", [9]).endswith("token ids: 9)")


def _stub_tree(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """run.sh in a tree whose setup, python and evokernel are stand-ins: `evokernel` logs its
    arguments, works quietly for a while on verify and generate, and writes what tune and
    report would."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "run.sh", tree / "run.sh")
    (tree / "scripts" / "setup.sh").write_text("#!/bin/sh\necho 'setup: up to date'\n")
    (tree / "scripts" / "setup.sh").chmod(0o755)
    bin_dir = tree / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "activate").write_text(f'PATH="{bin_dir}:$PATH"\n')
    (bin_dir / "python").write_text("#!/bin/sh\nexit 1\n")  # no CUDA: the CPU path
    (bin_dir / "evokernel").write_text(
        """#!/bin/bash
echo "evokernel $*" >>"$EVOKERNEL_LOG"
case "$1" in
  model) mkdir -p "$3" && echo '{}' >"$3/config.json" ;;
  verify|generate) sleep 3; echo "$1 done" ;;
  tune) args="$*"; out=${args##*--out }; out=${out%% *}
        mkdir -p "$out/runs/decode_layer" "$out/programs"
        echo '{}' >"$out/pack.json"; echo "tune done" ;;
  report) echo "<html>" >"$2/report.html"; echo "wrote $2/report.html" ;;
esac
"""
    )
    for name in ("python", "evokernel"):
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVOKERNEL_", "MODEL"))}
    env.update(EVOKERNEL_TICK_S="1", EVOKERNEL_LOG=str(tmp_path / "calls.log"))
    return tree, env


@pytest.mark.skipif(shutil.which("bash") is None, reason="run.sh needs bash")
def test_run_sh_ticks_while_steps_work_and_ends_naming_the_report(tmp_path: Path) -> None:
    tree, env = _stub_tree(tmp_path)
    started = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "run.sh"], cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    stamped = []
    assert proc.stdout is not None
    for line in proc.stdout:
        stamped.append((time.monotonic() - started, line.rstrip("\n")))
    assert proc.wait(timeout=120) == 0, stamped
    lines = [line for _, line in stamped]
    # Each quiet step ticks (every second here, every 20 s by default), and stops ticking.
    assert any(line.startswith("   ... verify still running (") for line in lines), lines
    assert any(line.startswith("   ... generate still running (") for line in lines), lines
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(stamped)]
    assert max(gaps) < 2.5, stamped
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls[-1] == "evokernel report runs/pack/runs/decode_layer"
    tail = lines[lines.index("== done. Written:") :]
    assert "   runs/pack/runs/decode_layer/report.html   open it in a browser" in tail
    assert "   Write a run's page again (or any evolve run's): evokernel report RUN_DIR" in tail
    assert any("runs/pack/pack.json" in line and "--kernels runs/pack" in line for line in tail)
    assert any(line.startswith("   checkpoints/random-qwen3-0.6b/") for line in tail)
    time.sleep(0.3)
    assert _working_in(tree) == []  # no ticker (nor its sleep) outlives the job


def _working_in(tree: Path) -> list[str]:
    """The processes whose working directory is `tree` (an orphaned ticker would be one)."""
    found = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            if Path(os.readlink(cwd)) == tree:
                found.append(cwd.parent.name)
        except OSError:
            continue
    return found
