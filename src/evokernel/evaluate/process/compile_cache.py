"""A Triton compile cache shared across candidates, that no candidate can write into.

Triton keeps each compiled kernel (and each C launcher stub, and its driver module) in a
directory named after a hash of everything that determines it: for a kernel, its source and
the sources it calls, the argument signature and specialisation, constants, options, target and
Triton's own version; for a launcher, its generated C source. Two different sources therefore
never have the same key. What must also hold is that no worker can *put* a binary under a key
that another candidate will read (a planted binary would run as the other candidate's kernel):

* Every worker compiles into its own scratch directory (TRITON_CACHE_DIR), the only place it
  can write (Landlock). Through `worker/tritoncache.py` it reads, after its own directory, the
  shared directories this module names in its environment; those are read-only to it.
* `trusted/` receives only what a worker built *before any candidate code ran in it*: its
  trusted set-up (Triton's driver module, the launcher stubs and the warm-up kernels), copied
  by the parent when the worker reports ready (pool.start). Every worker reads it.
* `by-source/<sha256 of the candidate's source>/` receives what a worker built after candidate
  code ran, copied by the parent when the worker is gone; only a later evaluation of exactly
  the same source gets it (copied into that worker's own directory before the candidate is
  imported). A candidate can thus only ever affect evaluations of itself, which it controls
  anyway; re-evaluations (the cascade's second look, duplicates, the same program in another
  run) skip their compiles.
* What the parent copies is checked for shape: entry names are Triton hashes, files are
  regular files (no links) of bounded size with plain names, nothing else; group index files
  are rewritten by the parent to point at the copies. Entries are published by an atomic rename
  and never overwritten.

Location: $EVOKERNEL_COMPILE_CACHE, else $XDG_CACHE_HOME/evokernel/compile, else
~/.cache/evokernel/compile; one subdirectory per Triton version. EVOKERNEL_COMPILE_CACHE=off
disables it. CPU workers (Triton's interpreter) compile nothing and do not use it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import threading
import uuid
from pathlib import Path

MANAGER = "evokernel.evaluate.worker.tritoncache:LayeredCache"
SHARED_ENV = "EVOKERNEL_SHARED_CACHE"
_KEY = re.compile(r"^(?:[A-Z2-7]{52}|[0-9a-f]{64})$")
_FILE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
_MAX_FILE = 64 * 2**20
_MAX_ENTRY_FILES = 32
_MAX_SOURCES = 512  # by-source partitions kept (oldest removed first)


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


class CompileCache:
    """One shared cache directory (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.trusted = root / "trusted"
        self.sources = root / "by-source"
        for d in (self.root, self.trusted, self.sources):
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o755)  # a worker running as nobody must read it

    # --- what a worker gets ------------------------------------------------------------------
    def worker_env(self) -> dict[str, str]:
        return {"TRITON_CACHE_MANAGER": MANAGER, SHARED_ENV: str(self.trusted)}

    def read_paths(self) -> tuple[str, ...]:
        return (str(self.trusted),)

    def seed_private(self, scratch: Path, source: str) -> int:
        """Copy the entries kept for `source` into a worker's own cache directory (before the
        candidate is imported). Returns how many."""
        partition = self.sources / source_digest(source)
        if not partition.is_dir():
            return 0
        with contextlib.suppress(OSError):
            os.utime(partition)  # recently used: pruned last
        return _copy_entries(partition, scratch / "triton", skip=())

    # --- what the parent keeps ---------------------------------------------------------------
    def keep_trusted(self, scratch: Path) -> int:
        """After a worker's trusted set-up (no candidate code ran in it yet)."""
        return _copy_entries(scratch / "triton", self.trusted, skip=())

    def keep_for_source(self, scratch: Path, source: str) -> int:
        """After an evaluation, the worker gone: what it compiled, for this source only."""
        partition = self.sources / source_digest(source)
        partition.mkdir(exist_ok=True)
        os.chmod(partition, 0o755)
        kept = _copy_entries(scratch / "triton", partition, skip=_names(self.trusted))
        self._prune()
        return kept

    def _prune(self) -> None:
        try:
            parts = sorted(self.sources.iterdir(), key=lambda d: d.stat().st_mtime)
        except OSError:
            return
        for old in parts[: max(0, len(parts) - _MAX_SOURCES)]:
            shutil.rmtree(old, ignore_errors=True)


def _names(directory: Path) -> set[str]:
    try:
        return {p.name for p in directory.iterdir()}
    except OSError:
        return set()


def _read_regular(path: Path) -> bytes | None:
    """The bytes of a regular file no bigger than the limit, never following a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_FILE:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(_MAX_FILE + 1)
    finally:
        os.close(fd)


def _entry_files(entry: Path) -> dict[str, bytes] | None:
    """The files of one cache entry, or None when it is not a well-formed Triton entry."""
    try:
        if entry.is_symlink() or not entry.is_dir():
            return None
        names = [n.name for n in entry.iterdir()]
    except OSError:
        return None
    files: dict[str, bytes] = {}
    for name in names:
        if name == "lock" or name.startswith("tmp."):
            continue  # Triton's lock file and unfinished writes
        if not _FILE.match(name) or len(files) >= _MAX_ENTRY_FILES:
            return None
        data = _read_regular(entry / name)
        if data is None:
            return None
        files[name] = data
    return files or None


def _regroup(data: bytes, target: Path, names: set[str]) -> bytes | None:
    """A group index (`__grp__*.json`) rewritten to point at the copies in `target`."""
    try:
        group = json.loads(data)
        paths = group["child_paths"]
        assert isinstance(paths, dict)
        fixed = {}
        for child, path in paths.items():
            base = os.path.basename(str(path))
            if not isinstance(child, str) or base not in names:
                return None
            fixed[child] = str(target / base)
    except (ValueError, KeyError, AssertionError, TypeError):
        return None
    return json.dumps({"child_paths": fixed}).encode()


def _copy_entries(source: Path, dest: Path, skip: set[str] | tuple[()]) -> int:
    """Copy well-formed entries of `source` missing from `dest` (created if need be); each
    appears atomically. A `source` that is a link is not followed (candidate code may have
    replaced its own cache directory with one)."""
    try:
        if source.is_symlink():
            return 0
        entries = [e for e in source.iterdir() if _KEY.match(e.name)]
    except OSError:
        return 0
    if not entries:
        return 0
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError:
        return 0
    have = _names(dest)
    copied = 0
    for entry in entries:
        if entry.name in have or entry.name in skip:
            continue
        files = _entry_files(entry)
        if files is None:
            continue
        final = dest / entry.name
        staging = dest / f".staging-{uuid.uuid4().hex}"
        staging.mkdir()
        try:
            for name, data in files.items():
                if name.startswith("__grp__"):
                    fixed = _regroup(data, final, set(files))
                    if fixed is None:
                        raise ValueError("malformed group index")
                    data = fixed
                target = staging / name
                target.write_bytes(data)
                os.chmod(target, 0o644)
            os.chmod(staging, 0o755)
            os.rename(staging, final)  # fails if another process published it first
            copied += 1
        except (OSError, ValueError):
            pass
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return copied


_SHARED: list[CompileCache | None] = []
_LOCK = threading.Lock()


def shared() -> CompileCache | None:
    """This process's shared compile cache (None when switched off or not creatable)."""
    with _LOCK:
        if not _SHARED:
            _SHARED.append(_make())
        return _SHARED[0]


def _make() -> CompileCache | None:
    setting = os.environ.get("EVOKERNEL_COMPILE_CACHE", "")
    if setting.lower() in ("off", "0", "none"):
        return None
    if setting:
        base = Path(setting)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        base = Path(xdg) / "evokernel" / "compile"
    try:
        import triton

        version = triton.__version__
    except ImportError:
        return None
    try:
        return CompileCache(base / f"triton-{version}")
    except OSError:
        return None
