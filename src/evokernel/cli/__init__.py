"""The `evokernel` console script: parse, dispatch, print. No logic lives here.

Each verb is a module in this package exposing::

    ORDER: int                                  # position in --help
    def register(sub: argparse._SubParsersAction) -> None
        # adds its parser and sets `func=<callable(args) -> int>` as the default

Verb modules are discovered at start, so adding a verb never edits this file. Errors derived
from `EvokernelError` become one line on stderr and a non-zero exit; an interrupt exits 130 and
a closed stdout pipe 141, quietly; nothing else is caught.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

from evokernel import __version__
from evokernel.errors import EvokernelError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
