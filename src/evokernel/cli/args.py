"""Checked command-line values: numbers, lists and paths, each refused with one line.

Every verb declares its flags with argparse and checks their values with these helpers at the
top of its `run()`, before any work starts:

    n = integer(args.max_new_tokens, "--max-new-tokens", lo=1)
    t = real(args.temperature, "--temperature", lo=0.0)          # always finite
    s = seed(args.seed)                                         # [0, 2**63)
    ids = int_list(args.prompt_ids, "--prompt-ids")             # "1, 2,3" -> [1, 2, 3]
    names = name_list(args.scenarios, "--scenarios")            # "a,b" -> ("a", "b")
    model = existing_dir(args.model, "--model")
    cand = regular_file(args.candidate, "CANDIDATE")
    out = output_dir(args.out, "--out")                          # checked, not created
    page = output_file(args.out, "--out")                        # a file to (re)write

Why here and not in argparse `type=` callables: argparse reports a bad value as a usage block
plus a message (several lines); these raise `ConfigError`, which the CLI prints as one
`error: ...` line with exit 2. So numeric flags are declared without `type=` (their value is
the string the user typed, or the Python default) and parsed here, which also gives
"--seed: expected an integer, got '1.5'" one line.

The rules, the same for every verb (`bench`, `tune`, `report` and later verbs included):
  * integers are plain ASCII decimals ("1_000", "1e3", "0x10" are refused) within the bounds
    the flag names; floats are finite (nan and inf are refused) within theirs;
  * seeds are integers in [0, 2**63): every seed consumer takes that range (a torch
    generator takes [-2**63, 2**64) but folds negative seeds onto large ones);
  * lists have no empty items ("1,,2" is an error, not two items);
  * paths are never empty (an empty string would mean the current directory); an input file
    must be a regular file (a FIFO is never opened: reading one blocks), an input directory a
    directory; an output directory must be creatable: not under a regular file; an output
    file may only replace a regular file (a device, FIFO, socket or directory there, or a
    symlink leading under /proc, /sys or /dev, is refused and left as it is), and its
    directory must exist or be creatable, writable (evokernel.files.output_file).
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path

from evokernel import files
from evokernel.errors import ConfigError

SEED_MAX = 2**63 - 1
_INTEGER = re.compile(r"[+-]?[0-9]+")


def integer(value: str | int, flag: str, lo: int | None = None, hi: int | None = None) -> int:
    """`value` (a flag's text, or its int default) as an int within [lo, hi]."""
    if isinstance(value, str):
        text = value.strip()
        if not _INTEGER.fullmatch(text):
            raise ConfigError(f"{flag}: expected an integer, got {value!r}")
        try:
            number = int(text)
        except ValueError:  # more digits than Python converts (4300)
            raise ConfigError(f"{flag}: {value[:20]}... is out of range") from None
    else:
        number = value
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        raise ConfigError(f"{flag} must be {_bounds(lo, hi)}, got {number}")
    return number


def real(
    value: str | float,
    flag: str,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
) -> float:
    """`value` as a finite float within [lo, hi] (or (lo, hi] with `lo_open`)."""
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{flag}: expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ConfigError(f"{flag} must be a finite number, got {value!r}")
    too_low = lo is not None and (number <= lo if lo_open else number < lo)
    if too_low or (hi is not None and number > hi):
        raise ConfigError(f"{flag} must be {_bounds(lo, hi, lo_open)}, got {number:g}")
    return number


def seed(value: str | int, flag: str = "--seed") -> int:
    number = integer(value, flag)
    if not 0 <= number <= SEED_MAX:
        raise ConfigError(f"{flag} must be in [0, 2**63), got {number}")
    return number


def int_list(text: str, flag: str, lo: int = 0) -> list[int]:
    """Comma-separated integers >= lo ("1, 2,3"); empty items and empty lists are errors."""
    items = text.split(",")
    if not text.strip():
        raise ConfigError(f"{flag}: no values given")
    out = []
    for k, item in enumerate(items):
        if not item.strip():
            raise ConfigError(f"{flag}: item {k + 1} of {text!r} is empty")
        if not _INTEGER.fullmatch(item.strip()):
            raise ConfigError(f"{flag}: expected comma-separated integers, got {item.strip()!r}")
        out.append(integer(item, flag, lo=lo))
    return out


def name_list(text: str, flag: str) -> tuple[str, ...]:
    """Comma-separated names ("a, b"); empty items and empty lists are errors."""
    if not text.strip():
        raise ConfigError(f"{flag}: no names given")
    names = tuple(item.strip() for item in text.split(","))
    if "" in names:
        raise ConfigError(f"{flag}: item {names.index('') + 1} of {text!r} is empty")
    return names


def existing_dir(path: str | Path, flag: str) -> Path:
    """An existing directory we may list."""
    return _existing(path, flag, "directory")


def regular_file(path: str | Path, flag: str) -> Path:
    """An existing regular file we may read (never opened here: a FIFO would block)."""
    return _existing(path, flag, "file")


def _existing(path: str | Path, flag: str, what: str) -> Path:
    p = _path(path, flag)
    mode = _stat(p, flag, what)
    directory = what == "directory"
    if not (stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode)):
        kind = "a directory" if directory else "a regular file"
        raise ConfigError(f"{flag}: {p} is {_kind(mode)}, not {kind}")
    if not os.access(p, os.R_OK | os.X_OK if directory else os.R_OK):
        raise ConfigError(f"{flag}: {p}: permission denied")
    return p


def output_dir(path: str | Path, flag: str) -> Path:
    """A directory to write into: an existing directory, or a path whose nearest existing
    ancestor is a writable directory. Nothing is created here."""
    p = _path(path, flag)
    try:
        ancestor, mode = files.nearest_existing(p)
    except files.FileRefused as err:
        raise ConfigError(f"{flag}: {err}") from None
    if not stat.S_ISDIR(mode):
        what = "exists and" if ancestor == p else f"lies under {ancestor}, which"
        raise ConfigError(f"{flag}: {p} {what} is {_kind(mode)}, not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag}: {p}: {ancestor} is not writable")
    return p


def output_file(path: str | Path, flag: str) -> Path:
    """A file to write (or replace): see the rules above. Returns the path as given; the
    writers check again when they write (minutes may pass), and write through a link to a
    regular file rather than replacing the link."""
    p = _path(path, flag)
    try:
        files.output_file(p)
    except files.FileRefused as err:
        raise ConfigError(f"{flag}: {err}") from None
    return p


def _path(path: str | Path, flag: str) -> Path:
    if not str(path).strip():
        raise ConfigError(f"{flag}: empty path")
    return Path(path)


def _stat(p: Path, flag: str, what: str) -> int:
    try:
        return os.stat(p).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigError(f"{flag}: no such {what}: {p}") from None
    except OSError as err:
        raise ConfigError(f"{flag}: {p}: {err.strerror or err}") from None


def _kind(mode: int) -> str:
    return files.kind(mode)


def _bounds(lo: float | None, hi: float | None, lo_open: bool = False) -> str:
    def num(x: float) -> str:
        return f"{x:g}" if isinstance(x, float) else str(x)

    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{num(lo)}, {num(hi)}]"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {num(lo)}"
    assert hi is not None
    return f"<= {num(hi)}"
