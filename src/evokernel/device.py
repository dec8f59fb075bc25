"""Which device we run on, and the Triton mode that goes with it.

On a machine without CUDA, Triton kernels run under Triton's interpreter
(`TRITON_INTERPRET=1`), which must be set before any `@triton.jit` function is defined.
Call `prepare(device)` before importing anything from `evokernel.kernels` or loading a
candidate; kernel modules are therefore imported lazily by their launchers.

The interpreter computes bfloat16 as NaN (seen with Triton 3.6 and 3.9): on the CPU, test and
run kernels in float32 or float16 (`default_dtype("cpu")` is float32). Its data-dependent
loops fail with numpy >= 2.4 (an `InterpreterError` deep inside a kernel): callers about to
run Triton kernels on the CPU call `check_interpreter()` first, which names the package.
"""

from __future__ import annotations

import os
import re
import sys

import torch

from evokernel.errors import EvokernelError


def resolve(device: str | None) -> str:
    """ "cuda" or "cpu"; None means CUDA when present. Asking for CUDA without one is an error."""
    if device is None or device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cuda", "cpu"):
        raise EvokernelError(f"unknown device {device!r} (use cuda or cpu)")
    if device == "cuda" and not torch.cuda.is_available():
        raise EvokernelError("--device cuda: no CUDA GPU is visible to torch")
    return device


def prepare(device: str) -> None:
    """Set Triton's mode for `device`. Must run before kernels are defined."""
    want = "1" if device == "cpu" else None
    have = os.environ.get("TRITON_INTERPRET")
    if want == have or (want is None and have in (None, "0", "")):
        return
    if any(name.startswith("evokernel.kernels") for name in sys.modules):
        raise RuntimeError(
            f"Triton mode for device {device!r} set after kernels were imported; "
            "call evokernel.device.prepare() first"
        )
    if want is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = want


# The first numpy release whose arrays the Triton interpreter's loops fail on (Triton 3.6).
INTERPRETER_NUMPY_BELOW = (2, 4)


def check_interpreter(hint: str = "") -> None:
    """Raise a one-line `EvokernelError` when Triton's interpreter cannot run kernels here;
    `hint` ends the message (an alternative the caller offers).

    Imports numpy (torch has usually imported it already), so call it only when Triton
    kernels are about to run on the CPU."""
    import numpy

    version = numpy.__version__
    found = re.match(r"(\d+)\.(\d+)", version)
    if found and (int(found[1]), int(found[2])) >= INTERPRETER_NUMPY_BELOW:
        want = "numpy<{}.{}".format(*INTERPRETER_NUMPY_BELOW)
        raise EvokernelError(
            f"Triton kernels on the CPU run under Triton's interpreter, which needs {want}; "
            f"numpy {version} is installed: pip install '{want}'{hint}"
        )


def default_dtype(device: str) -> torch.dtype:
    return torch.bfloat16 if device == "cuda" else torch.float32


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
