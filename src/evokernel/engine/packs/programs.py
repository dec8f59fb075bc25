"""Import a kernel pack's programs: the bytes pack.json's hash names, checked, then guarded.

    fn = import_program(pack, "programs/<file>.py", "decode_layer")

In order, each refusal a one-line PackError naming the pack and the program:
  1. the pack's trust (engine/packs/trust.py), unless this process already admitted it
     (`pack.trust`);
  2. the file is read once, as a regular file (a FIFO is refused, never opened for reading);
     its bytes must match the content hash pack.json records for it (every time: a program
     changed after an earlier load is refused, not served from the earlier import);
  3. those bytes pass the evaluator's static check (evaluate/static.py: allowlisted imports,
     no I/O, process control, introspection or patching of libraries), as every search
     candidate did; the EVOLVE-BLOCK markers it also asks for are the search's business, so a
     program without them is checked as if they closed it;
  4. they run as a new module named by their hash (one program text is imported once per
     process; the module is what Triton's JIT looks up); whatever escapes the import, an
     exception, SystemExit or a KeyboardInterrupt the program raised (a Ctrl-C of the user's
     still interrupts), is one line and the module is dropped;
  5. the entry point must be a function.
What Triton and tracebacks read as the module's source is the checked text (linecache holds
it), not whatever the file holds later. `guarded(pack, program, what)` turns what escapes a
program's first call (engine/packs/selfcheck.py) into the same kind of line.
"""

from __future__ import annotations

import contextlib
import linecache
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

from evokernel.engine.packs.format import Pack, PackError
from evokernel.engine.packs.trust import content_hash, decide
from evokernel.files import FileRefused, read_regular

_MODULES: dict[str, types.ModuleType] = {}  # content hash -> the imported program


def import_program(pack: Pack, program: str, entry: str) -> Callable[..., Any]:
    """The function `entry` of `pack`'s program file `program` (pack-relative)."""
    where = f"kernel pack {pack.path}: program {program}"
    if pack.trust is None:
        decide(pack, allow_unsigned=False)
    want = pack.hashes.get(program)
    if want is None:
        raise PackError(
            f"{where} has no content hash in pack.json (a pack written before content hashes; "
            f"run evokernel tune --out {pack.path} again to rewrite it)"
        )
    module = _import(pack, program, want, where)
    fn = getattr(module, entry, None)
    if not callable(fn) or isinstance(fn, type):
        raise PackError(f"{where} defines no function {entry!r}")
    return fn


def _import(pack: Pack, program: str, want: str, where: str) -> types.ModuleType:
    file = (pack.path / program).resolve()
    try:
        data = read_regular(file)
    except FileNotFoundError:
        raise PackError(f"{where} is missing") from None
    except FileRefused as err:
        raise PackError(f"{where}: {err}") from None
    got = content_hash(data)
    if got != want:
        raise PackError(
            f"{where} does not match its content hash in pack.json (it was changed after the "
            f"pack was written: {got[:23]}..., recorded {want[:23]}...): refused"
        )
    module = _MODULES.get(want)
    if module is not None:  # this text was checked and imported before: the same module
        return module
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PackError(f"{where} is not UTF-8 text") from None
    problems = static_problems(source)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PackError(f"{where} fails the evaluator's static check: {problems[0]}{more}")
    name = f"evokernel_pack_program_{want.removeprefix('sha256:')[:24]}"
    module = types.ModuleType(name)
    module.__file__ = str(file)
    # Triton's JIT and inspect read a function's source through linecache: give them the
    # checked text (an mtime of None keeps linecache from re-reading the file).
    linecache.cache[str(file)] = (len(source), None, source.splitlines(True), str(file))
    sys.modules[name] = module  # Triton's JIT and dataclasses look the module up by name
    try:
        with guarded(pack, program, "at import"):
            exec(compile(source, str(file), "exec"), module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _MODULES[want] = module
    return module


def static_problems(source: str) -> list[str]:
    """The evaluator's static check of a program (evaluate/static.py), minus its EVOLVE-BLOCK
    rule: marker lines are blanked (line numbers stay) and one empty block is appended."""
    from evokernel.evaluate.static import check_source, source_problems
    from evokernel.tasks.blocks import END, START

    problems = source_problems(source)
    if problems:
        return problems
    lines = source.split("\n")
    blanked = ["" if line.strip() in (START, END) else line for line in lines]
    return check_source("\n".join([*blanked, START, END, ""]))


@contextlib.contextmanager
def guarded(pack: Pack, program: str, what: str) -> Iterator[None]:
    """Run a program's code: anything that escapes it (an exception, SystemExit, a
    KeyboardInterrupt it raised itself) becomes one PackError line; a real Ctrl-C of the
    user's (a SIGINT arriving meanwhile) still interrupts."""
    with _user_interrupts() as interrupted:
        try:
            yield
        except PackError:
            raise
        except KeyboardInterrupt:
            if interrupted():
                raise
            raise PackError(
                f"kernel pack {pack.path}: program {program} raised KeyboardInterrupt {what}"
            ) from None
        except BaseException as err:
            detail = " ".join(str(err).split())[:200]
            kind = type(err).__name__ + (f"({detail})" if detail else "")
            raise PackError(
                f"kernel pack {pack.path}: program {program} raised {kind} {what}"
            ) from None


@contextlib.contextmanager
def _user_interrupts() -> Iterator[Callable[[], bool]]:
    """While inside, note whether a SIGINT arrived (and still raise KeyboardInterrupt for
    it), so a KeyboardInterrupt the program raises can be told from the user's."""
    seen = [False]
    if threading.current_thread() is not threading.main_thread():
        yield lambda: True  # no handler can be set here: every interrupt counts as the user's
        return
    previous = signal.getsignal(signal.SIGINT)

    if previous in (signal.SIG_IGN, None):  # interrupts are off (or not Python's to see)
        yield lambda: False
        return

    def handler(signum: int, frame: types.FrameType | None) -> None:
        seen[0] = True
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main interpreter
        yield lambda: True
        return
    try:
        yield lambda: seen[0]
    finally:
        signal.signal(signal.SIGINT, previous)


__all__ = ["guarded", "import_program", "static_problems"]
