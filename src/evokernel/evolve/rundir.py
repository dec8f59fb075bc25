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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
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

    @classmethod
    def create(cls, path: Path) -> RunDir:
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise EvokernelError(
                f"run directory {path} already exists; pass --resume to continue it, "
                "or choose another --out"
            )
        path.mkdir(parents=True, exist_ok=True)
        return cls(path)

    @classmethod
    def open(cls, path: Path) -> RunDir:
        run = cls(path)
        if not run.exists():
            raise EvokernelError(f"{path} holds no run to resume (no {DB_NAME})")
        return run

    def lock(self) -> IO[str]:
        """Hold the run's lock until the returned file is closed (or the process dies)."""
        f = open(self.path / "lock", "w")  # noqa: SIM115 - held for the run's lifetime
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
