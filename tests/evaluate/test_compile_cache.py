"""The shared compile cache: compiles are shared across workers, two different sources never
share a binary, and nothing a candidate's worker writes reaches another candidate. Real Triton
compiles for an sm_90 target (they need no GPU), each in its own process, reading the shared
cache through the worker's cache manager as a sandboxed worker does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from evokernel.evaluate.process.compile_cache import CompileCache, source_digest

HERE = Path(__file__).parent / "compile"


def compile_in(scratch: Path, cache: CompileCache, kernel: str) -> tuple[dict, set[str]]:
    """Compile `kernel` in a fresh process whose own cache is scratch/triton; returns its
    answer and the entries it wrote there."""
    private = scratch / "triton"
    private.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TRITON_CACHE_DIR": str(private), **cache.worker_env()}
    env.pop("TRITON_INTERPRET", None)
    cmd = [sys.executable, str(HERE / "compile_one.py"), str(HERE / kernel)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=True)
    written = {p.name for p in private.iterdir() if any(p.iterdir())}
    return json.loads(out.stdout.strip().splitlines()[-1]), written


def test_different_sources_never_share_a_binary_and_the_same_source_does(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache")
    one, wrote = compile_in(tmp_path / "w1", cache, "adds_one.py")
    assert wrote and cache.keep_trusted(tmp_path / "w1") == len(wrote)

    two, wrote_two = compile_in(tmp_path / "w2", cache, "adds_two.py")
    assert two["hash"] != one["hash"] and two["cubin"] != one["cubin"]
    assert wrote_two  # compiled on its own: nothing of the other source was taken

    again, wrote_again = compile_in(tmp_path / "w3", cache, "adds_one.py")
    assert again == one
    assert wrote_again == set()  # the same source: served from the shared cache


def test_a_candidates_worker_cannot_plant_a_binary_for_another(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache")
    one, _ = compile_in(tmp_path / "honest", cache, "adds_one.py")
    # A worker that ran candidate X plants its binary under the key honest code will look up.
    planted = tmp_path / "x" / "triton"
    for entry in (tmp_path / "honest" / "triton").iterdir():
        target = planted / entry.name
        target.mkdir(parents=True)
        for f in entry.iterdir():
            (target / f.name).write_bytes(b"planted" if f.suffix == ".cubin" else f.read_bytes())
    assert cache.keep_for_source(tmp_path / "x", "source X") > 0
    assert list(cache.trusted.iterdir()) == []  # never trusted: candidate code ran there
    # Another candidate's worker gets nothing of X's; the same source X gets its own back.
    assert cache.seed_private(tmp_path / "y", "source Y") == 0
    assert cache.seed_private(tmp_path / "x2", "source X") > 0
    theirs, _ = compile_in(tmp_path / "y", cache, "adds_one.py")
    assert theirs == one


def test_only_well_formed_entries_are_kept(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache")
    scratch = tmp_path / "w" / "triton"
    good = scratch / ("A" * 52)
    good.mkdir(parents=True)
    (good / "k.cubin").write_bytes(b"x")
    (good / "__grp__k.json").write_text(json.dumps({"child_paths": {"k.cubin": "/a/k.cubin"}}))
    linked = scratch / ("B" * 52)
    linked.mkdir()
    (linked / "k.cubin").symlink_to("/etc/hostname")  # would copy a file outside the scratch
    odd = scratch / "not-a-triton-key"
    odd.mkdir()
    (odd / "k.cubin").write_bytes(b"x")
    assert cache.keep_trusted(tmp_path / "w") == 1
    assert [p.name for p in cache.trusted.iterdir()] == ["A" * 52]
    group = json.loads((cache.trusted / ("A" * 52) / "__grp__k.json").read_text())
    assert group["child_paths"]["k.cubin"] == str(cache.trusted / ("A" * 52) / "k.cubin")
    assert source_digest("a") != source_digest("b")
