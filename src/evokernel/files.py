"""Files a user names: read only when regular, written only over regular files.

    data = read_regular(path)            # bytes; a FIFO, device or directory is refused
    target = output_file(path)           # where writing `path` lands; refused before any work

Why: opening a FIFO for reading blocks until a writer comes (a hang, not an error); reading a
character device may never end; and an atomic write (a temporary file renamed over the target)
replaces whatever the target was, so `--out /dev/full` once turned a device node into an HTML
file. Both refuse with `FileRefused` (an `EvokernelError`: one line, exit 2), whose text
follows the path ("/dev/full is a device file, not a regular file").

Reading opens with O_NONBLOCK and looks at the open file (fstat), so a FIFO swapped in after a
check is refused too. An output path is resolved first (a symlink is followed to its target,
which is what gets written); a target under /proc, /sys or /dev is refused whatever it is (their
"regular" files are kernel interfaces), as is an existing target that is not a regular file,
and one whose directory does not exist as a writable directory (created parents aside: the
nearest existing ancestor must be a writable directory).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from evokernel.errors import EvokernelError

SYSTEM_TREES = ("/proc", "/sys", "/dev")


class FileRefused(EvokernelError):
    """A path that must not be read or written as a plain file: one line naming it."""


def kind(mode: int) -> str:
    """`a FIFO`, `a device file`, ... for a stat mode."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a device file" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file"


def read_regular(path: str | Path) -> bytes:
    """The bytes of the regular file at `path`. FileNotFoundError propagates (callers word
    "missing" their way); anything else that stops the read is a FileRefused line."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise FileRefused(f"{p} is a directory, not a regular file") from None
    except OSError as err:
        raise FileRefused(f"{p}: cannot read ({err.strerror or err})") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise FileRefused(f"{p} is {kind(mode)}, not a regular file")
        os.set_blocking(f.fileno(), True)
        try:
            return f.read()
        except OSError as err:
            raise FileRefused(f"{p}: cannot read ({err.strerror or err})") from None


def output_file(path: str | Path) -> Path:
    """Where writing `path` lands (symlinks followed), checked before any work: refused when
    it lies under /proc, /sys or /dev, when something other than a regular file is there, or
    when no writable directory would hold it. Nothing is created here."""
    given = Path(path)
    if not str(path).strip():
        raise FileRefused("an empty path")
    target, visited = _resolve(given)
    for step in visited:
        tree = next((t for t in SYSTEM_TREES if step == Path(t) or step.is_relative_to(t)), None)
        if tree is not None:
            where = "lies under" if given.absolute().is_relative_to(tree) else "leads into"
            raise FileRefused(f"{given} {where} {tree}: not a place to write a file")
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:
        raise FileRefused(f"{given} lies under a file, not a directory") from None
    except OSError as err:
        raise FileRefused(f"{given}: {err.strerror or err}") from None
    if mode is not None:
        if not stat.S_ISREG(mode):
            via = "" if target == given.absolute() else f" (it leads to {target})"
            raise FileRefused(
                f"{given}{via} is {kind(mode)}, not a regular file: it is left as it is; "
                "choose a file path"
            )
        if not os.access(target, os.W_OK):
            raise FileRefused(f"{given}: permission denied")
    _writable_parent(given, target)
    return target


def _resolve(path: Path) -> tuple[Path, list[Path]]:
    """`path` with every symlink resolved (as os.path.realpath), and every path the resolution
    passed through: a link to /proc/self/fd/1 resolves to wherever stdout goes, but passes
    through /proc on its way, which is what decides."""
    current = Path("/")
    queue = list(Path(os.path.abspath(path)).parts[1:])
    visited: list[Path] = []
    hops = 0
    while queue:
        name = queue.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = current.parent
            continue
        step = current / name
        visited.append(step)
        if not os.path.islink(step):
            current = step
            continue
        hops += 1
        if hops > 40:
            raise FileRefused(f"{path}: too many levels of symbolic links")
        link = Path(os.readlink(step))
        if link.is_absolute():
            current = Path("/")
            queue = list(link.parts[1:]) + queue
        else:
            queue = list(link.parts) + queue
    return current, visited


def nearest_existing(path: Path) -> tuple[Path, int]:
    """(the nearest existing path at or above `path`, its stat mode). FileRefused when none
    exists or one cannot be examined."""
    ancestor = path
    while True:
        try:
            return ancestor, os.stat(ancestor).st_mode
        except FileNotFoundError:
            if ancestor.parent == ancestor:
                raise FileRefused(f"{path}: no existing parent directory") from None
            ancestor = ancestor.parent
        except NotADirectoryError:  # a component below is a regular file
            ancestor = ancestor.parent
        except OSError as err:
            raise FileRefused(f"{ancestor}: {err.strerror or err}") from None


def _writable_parent(given: Path, target: Path) -> None:
    """The nearest existing ancestor of `target` must be a writable directory (the writer
    creates the rest and puts its temporary file next to the target)."""
    try:
        ancestor, mode = nearest_existing(target.parent)
    except FileRefused as err:
        raise FileRefused(f"{given}: {err}") from None
    if not stat.S_ISDIR(mode):
        raise FileRefused(f"{given} lies under {ancestor}, which is {kind(mode)}")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise FileRefused(f"{given}: {ancestor} is not writable")


__all__ = ["FileRefused", "kind", "nearest_existing", "output_file", "read_regular"]
