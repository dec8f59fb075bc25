"""The run-time CUDA build: nvcc found or not, a library built and cached by its source's hash,
a failing build reported, and no library where there is no CUDA device (the Triton kernels
stay). Building needs nvcc on this machine (else those tests skip); running the kernels needs
a GPU (tests/kernels/test_decode_kernels.py)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import torch

from evokernel.ops import attention_cuda, cuda_build

NVCC = cuda_build.nvcc_path()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc on this machine")


def test_no_library_without_a_cuda_device() -> None:
    cpu = torch.device("cpu")
    assert cuda_build.cuda_library("attention_direct", cpu) is None
    assert cuda_build.why_not("attention_direct", cpu) == "not a CUDA device"
    qkv = torch.zeros(1, 4 * 128)
    cache = torch.zeros(1, 1, 16, 128)
    assert not attention_cuda.applies(qkv, cache, 2, 16)


def test_nvcc_is_found_under_cuda_home(tmp_path: Path, monkeypatch) -> None:
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert cuda_build.nvcc_path() in (str(nvcc), "/usr/local/cuda/bin/nvcc")


@needs_nvcc
@pytest.mark.parametrize(
    "name,launcher",
    [
        ("attention_direct", "evk_attention_direct"),
        ("int4_gemv", "evk_int4_gemv"),
        ("rows_mma", "evk_rows_mma"),
    ],
)
def test_each_source_builds_and_exports_its_launcher(name, launcher, tmp_path: Path) -> None:
    assert NVCC is not None
    out = tmp_path / f"{name}.so"
    cuda_build.compile_source(name, "90", out, NVCC)
    lib = ctypes.CDLL(str(out))
    assert hasattr(lib, launcher) and hasattr(lib, "evk_error_string")
    assert not list(tmp_path.glob(f".{name}-*"))  # no temporary left behind


@needs_nvcc
def test_a_failing_build_says_why_and_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    assert NVCC is not None
    (tmp_path / "broken.cu").write_text("this is not C++\n")
    monkeypatch.setattr(cuda_build, "SOURCES", tmp_path)
    out = tmp_path / "cache" / "broken.so"
    with pytest.raises(RuntimeError, match=r"nvcc failed on broken\.cu"):
        cuda_build.compile_source("broken", "90", out, NVCC)
    assert not out.exists() and not list(out.parent.glob(".broken-*"))


@needs_nvcc
def test_the_cache_name_follows_the_source(tmp_path: Path, monkeypatch) -> None:
    assert NVCC is not None
    monkeypatch.setattr(cuda_build, "SOURCES", tmp_path)
    monkeypatch.setenv("EVOKERNEL_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "k.cu"
    source.write_text("// one\n")
    first = cuda_build.library_path("k", "90", NVCC)
    source.write_text("// two\n")
    second = cuda_build.library_path("k", "90", NVCC)
    assert first != second and first.parent == second.parent == tmp_path / "cache" / "cuda"
    assert "sm90" in first.name


@needs_nvcc
def test_the_cache_name_follows_the_headers(tmp_path: Path, monkeypatch) -> None:
    """A source may include any header of the directory: changing one builds anew."""
    assert NVCC is not None
    monkeypatch.setattr(cuda_build, "SOURCES", tmp_path)
    (tmp_path / "k.cu").write_text('#include "common.cuh"\n')
    header = tmp_path / "common.cuh"
    header.write_text("// one\n")
    first = cuda_build.library_path("k", "90", NVCC)
    header.write_text("// two\n")
    assert cuda_build.library_path("k", "90", NVCC) != first


@needs_nvcc
def test_both_decode_sources_build_and_export_their_launchers(tmp_path: Path) -> None:
    """Each library loads with the launcher signature its ops module declares."""
    from evokernel.ops import persistent

    assert NVCC is not None
    for name, symbol in (("attention_direct", "evk_attention_direct"),
                         ("decode_persistent", "evk_decode_persistent")):  # fmt: skip
        out = tmp_path / f"{name}.so"
        cuda_build.compile_source(name, "90", out, NVCC)
        lib = ctypes.CDLL(str(out))
        if name == "decode_persistent":
            persistent.declare(lib)
            assert lib.evk_decode_persistent_static_smem.restype is ctypes.c_int
        else:
            cuda_build.declare_launcher(lib, symbol)
        fn = getattr(lib, symbol)
        assert len(fn.argtypes) == 7 and fn.argtypes[2] == ctypes.POINTER(ctypes.c_void_p)
        assert fn.restype is ctypes.c_int and lib.evk_error_string.restype is ctypes.c_char_p
