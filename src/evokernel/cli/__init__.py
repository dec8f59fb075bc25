"""The `evokernel` console script: parse, dispatch, print. No logic lives here.

Each verb is a module in this package exposing::

    ORDER: int                                  # position in --help
    def register(sub: argparse._SubParsersAction) -> None
        # adds its parser and sets `func=<callable(args) -> int>` as the default

Verb modules are discovered at start, so adding a verb never edits this file. Errors derived
from `EvokernelError` become one line on stderr and a non-zero exit; so do argparse's own
(an unknown flag, a missing argument, a bad choice: `error: evokernel VERB: ... (see
evokernel VERB --help)`, exit 2, instead of a usage block); an interrupt exits 130 and a
closed stdout pipe 141, quietly; nothing else is caught.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import NoReturn

from evokernel import __version__
from evokernel.errors import EvokernelError


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (its sub-parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        line = " ".join(message.split())
        self.exit(2, f"error: {self.prog}: {line} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="evokernel",
        description=(
            "Qwen3 decode engine, trustworthy kernel evaluator and evolutionary kernel search."
        ),
    )
    parser.add_argument("--version", action="version", version=f"evokernel {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    modules = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "register"):
            modules.append(module)
    for module in sorted(modules, key=lambda m: getattr(m, "ORDER", 100)):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers, not at exit
        return code
    except EvokernelError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`evokernel tasks | head -1`): stop quietly, as a shell tool
        # does, and keep Python from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
