"""Build a CUDA C++ source of kernels/cuda/ into a shared library once per machine, and load it.

    lib = cuda_library("attention_short", device)   # ctypes.CDLL, or None (see `why_not`)

The library is compiled by `nvcc` (found on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin)
for the device's own architecture (`-gencode arch=compute_XY,code=sm_XY`, so Hopper's
instructions are there; `-lineinfo`, so a profiler can show source lines), and cached under
$EVOKERNEL_CACHE (default ~/.cache/evokernel)/cuda, named by the hash of the source and of the
directory's headers (kernels/cuda/*.cuh), the architecture and nvcc's version: a changed
source or header or another GPU kind builds anew, a second process reuses the file (written
to a temporary name, then renamed, so a concurrent build never leaves half a library). A
failed or impossible build is remembered for the process; `why_not(name, device)` says why
in one line. Loading happens on the host, never during CUDA graph capture if the first call
is made eagerly (warm-up does).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

SOURCES = Path(__file__).resolve().parent.parent / "kernels" / "cuda"
BUILD_TIMEOUT_S = 300

_FAILED: dict[tuple[str, str], str] = {}


def nvcc_path() -> str | None:
    home = os.environ.get("CUDA_HOME")
    for candidate in (
        shutil.which("nvcc"),
        os.path.join(home, "bin", "nvcc") if home else None,
        "/usr/local/cuda/bin/nvcc",
    ):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def cache_dir() -> Path:
    root = os.environ.get("EVOKERNEL_CACHE") or os.path.join(Path.home(), ".cache", "evokernel")
    return Path(root) / "cuda"


def arch_of(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"{major}{minor}"


@functools.lru_cache(maxsize=4)
def _nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "unknown"


def compile_source(name: str, arch: str, out: Path, nvcc: str) -> None:
    """nvcc kernels/cuda/<name>.cu -> out (a shared library for sm_<arch>); raises on failure."""
    source = SOURCES / f"{name}.cu"
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".so", dir=out.parent)
    os.close(fd)
    cmd = [
        nvcc, "-O3", "-std=c++17", "-lineinfo", f"-gencode=arch=compute_{arch},code=sm_{arch}",
        "-shared", "-Xcompiler", "-fPIC", "-o", tmp, str(source),
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed on {source.name}: {proc.stderr.strip()[-2000:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def library_path(name: str, arch: str, nvcc: str) -> Path:
    """The cache file of `name`'s library: named by its source, every header of the directory
    (any source may include any), the architecture and nvcc's version."""
    digest = hashlib.sha256((SOURCES / f"{name}.cu").read_bytes())
    for header in sorted(SOURCES.glob("*.cuh")):
        digest.update(header.name.encode() + header.read_bytes())
    digest.update(_nvcc_version(nvcc).encode())
    return cache_dir() / f"{name}-sm{arch}-{digest.hexdigest()[:16]}.so"


@functools.lru_cache(maxsize=16)
def _load(name: str, arch: str) -> ctypes.CDLL:
    nvcc = nvcc_path()
    if nvcc is None:
        raise RuntimeError("no nvcc (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    path = library_path(name, arch, nvcc)
    if not path.is_file():
        print(f"evokernel: building CUDA kernels {name}.cu for sm_{arch} ...", file=sys.stderr)
        compile_source(name, arch, path, nvcc)
    return ctypes.CDLL(str(path))


def cuda_library(name: str, device: torch.device) -> ctypes.CDLL | None:
    """The loaded library of kernels/cuda/<name>.cu for `device`, or None where it cannot be
    had (not a CUDA device, no nvcc, a failed build: `why_not` says which)."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return None
    arch = arch_of(device)
    key = (name, arch)
    if key in _FAILED:
        return None
    try:
        return _load(name, arch)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        _FAILED[key] = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"evokernel: CUDA kernels {name}.cu unavailable: {_FAILED[key]}", file=sys.stderr)
        return None


def why_not(name: str, device: torch.device) -> str | None:
    """Why `cuda_library(name, device)` gave None (None if it did not, or was not asked)."""
    if device.type != "cuda":
        return "not a CUDA device"
    return _FAILED.get((name, arch_of(device)))


def declare_launcher(lib: ctypes.CDLL, name: str) -> None:
    """Declare the C signature every launcher of kernels/cuda/ shares, `int name(int dtype,
    int pdl, void** ptrs, const float* f, const int* n, const int64_t* strides, void* stream)`
    (a cudaError_t back), and `const char* evk_error_string(int)`."""
    fn = getattr(lib, name)
    fn.argtypes = [
        ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int),
        ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p,
    ]  # fmt: skip
    fn.restype = ctypes.c_int
    lib.evk_error_string.argtypes = [ctypes.c_int]
    lib.evk_error_string.restype = ctypes.c_char_p


@functools.cache
def launcher_library(name: str, launcher: str, device: torch.device) -> ctypes.CDLL | None:
    """`cuda_library(name, device)` with its launcher's C signature declared (`declare_launcher`),
    or None; once per (library, device)."""
    lib = cuda_library(name, device)
    if lib is not None:
        declare_launcher(lib, launcher)
    return lib
