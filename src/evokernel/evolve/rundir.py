"""The run directory: where a search keeps everything it needs to resume and to be read.

    RUN_DIR/
      programs.sqlite   the program database (database.py): the only state a resume reads
      config.yaml       the effective configuration (a copy of what the database holds)
      lock              held (flock) by the process running the search
      programs/<id>.py  each program's source, for people and diff tools
      llm/<id>.*.txt    prompt and response of each LLM proposal
      best.py, dispatch.json, summary.json   written at the end (dispatch.py)

A new run refuses a directory that exists and is not empty; `--resume` refuses one without a
database. Files other than the database are written atomically (temp file + rename).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from evokernel.errors import EvokernelError

DB_NAME = "programs.sqlite"


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename; a failure (disk full, a
    read-only directory) is one `EvokernelError` line and leaves `path` as it was."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as err:
        raise EvokernelError(f"cannot write {path}: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise EvokernelError(f"cannot write {path}: {err.strerror or err}") from None
        raise


@dataclass
class RunDir:
    path: Path

    @property
    def db(self) -> Path:
        return self.path / DB_NAME

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    def program_file(self, program_id: str) -> Path:
        return self.path / "programs" / f"{program_id}.py"

    def llm_file(self, program_id: str, part: str) -> Path:
        return self.path / "llm" / f"{program_id}.{part}.txt"

    def exists(self) -> bool:
        return self.db.exists()

    @staticmethod
    def check_new(path: Path) -> None:
        """Refuse `path` for a new run unless it is absent or an empty directory."""
        try:
            taken = path.exists() and (not path.is_dir() or any(path.iterdir()))
        except OSError as err:
            raise EvokernelError(f"cannot use {path} as a run directory: {err.strerror}") from None
        if taken:
            raise EvokernelError(
                f"run directory {path} already exists; pass --resume to continue it, "
                "or choose another --out"
            )

    @classmethod
    def create(cls, path: Path) -> RunDir:
        cls.check_new(path)
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / ".evokernel-write-test"
            probe.write_text("")  # fail now, not at the first checkpoint
            probe.unlink()
        except OSError as err:
            raise EvokernelError(
                f"cannot create run directory {path}: {err.strerror or err}"
            ) from None
        return cls(path)

    @classmethod
    def open(cls, path: Path, purpose: str = "to resume") -> RunDir:
        """An existing run directory; `purpose` completes the error message."""
        if not path.exists():
            raise EvokernelError(f"no such run directory: {path}")
        if not path.is_dir():
            raise EvokernelError(f"{path} is not a run directory (not a directory)")
        run = cls(path)
        if not run.exists():
            raise EvokernelError(f"{path} holds no run {purpose} (no {DB_NAME})")
        return run

    def lock(self) -> IO[str]:
        """Hold the run's lock until the returned file is closed (or the process dies)."""
        try:
            f = open(self.path / "lock", "w")  # noqa: SIM115 - held for the run's lifetime
        except OSError as err:
            raise EvokernelError(f"cannot lock {self.path}: {err.strerror or err}") from None
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise EvokernelError(f"{self.path} is in use by another evokernel process") from None
        return f

    def running(self) -> bool:
        """Whether some process holds the run's lock now."""
        lock = self.path / "lock"
        if not lock.exists():
            return False
        with open(lock) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
        return False
