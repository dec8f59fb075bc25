"""scripts/setup.sh with no package index (a GPU machine's case).

With every dependency already installed in the interpreter the venv is built from, the setup
must not need the network and must leave a working `evokernel`; with one missing, it must end
with one clear line (what is missing, how to install it) instead of pip's traceback.

Each test copies the files setup.sh reads into a temporary tree and runs it there as on a CUDA
machine (a stand-in `nvidia-smi` first on PATH), with PYTHON set to this interpreter (which
has every dependency) and pip pointed at no index at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or shutil.which("bash") is None, reason="setup.sh needs Linux and bash"
)


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "scripts/setup.sh"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "constraints", tree / "constraints")
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "src", tree / "src", ignore=skip)
    return tree


def _offline_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: stand-in for the test'\n")
    smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "EVOKERNEL_"))}
    env.pop("PYTHONPATH", None)  # conftest points it at this checkout's src
    env.pop("VIRTUAL_ENV", None)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHON=sys.executable,
        EVOKERNEL_CHROMIUM="skip",
        # No index at all: PIP_NO_INDEX, and an address nothing listens on should pip try.
        PIP_NO_INDEX="1",
        PIP_INDEX_URL="http://127.0.0.1:9/",
        PIP_FIND_LINKS="",
        PIP_CONFIG_FILE=os.devnull,
        PIP_RETRIES="0",
        PIP_TIMEOUT="2",
    )
    return env


def _setup(tree: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/setup.sh", "ref"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_installed_dependencies_need_no_index(tmp_path: Path) -> None:
    tree, env = _tree(tmp_path), _offline_env(tmp_path)
    done = _setup(tree, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no network" in done.stdout

    where = subprocess.run(
        [str(tree / ".venv/bin/python"), "-c", "import evokernel; print(evokernel.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(tree / "src")
    tasks = subprocess.run(
        [str(tree / ".venv/bin/evokernel"), "tasks"], env=env, capture_output=True, text=True
    )
    assert tasks.returncode == 0, tasks.stderr
    assert "gqa_decode_attention" in tasks.stdout

    again = _setup(tree, env)  # idempotent: the stamp makes it a no-op
    assert again.returncode == 0
    assert again.stdout == ""


def test_missing_dependency_fails_in_one_line(tmp_path: Path) -> None:
    tree, env = _tree(tmp_path), _offline_env(tmp_path)
    pyproject = tree / "pyproject.toml"
    absent = 'dependencies = [\n  "evokernel-absent-package>=1",\n'
    pyproject.write_text(pyproject.read_text().replace("dependencies = [\n", absent, 1))
    done = _setup(tree, env)
    assert done.returncode == 1
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("setup: error: cannot install evokernel[ref]")
    assert "missing evokernel-absent-package>=1" in errors[0]
    assert "pip install 'evokernel-absent-package>=1'" in errors[0]
    assert "Traceback" not in done.stdout + done.stderr
