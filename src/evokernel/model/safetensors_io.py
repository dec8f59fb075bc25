"""The safetensors file format, read and written without ever holding a whole file in RAM.

A safetensors file is::

    [8 bytes: N, little-endian u64] [N bytes: JSON header] [data buffer]

The header maps each tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}` (offsets
relative to the data buffer), plus an optional `"__metadata__"` object of strings.

`read_header(path)` parses and checks a header by hand, so that a truncated or corrupt file is
reported precisely (one line naming the file, and the tensor where there is one) before any
tensor is touched. `TensorMap` memory-maps a checked file and hands out zero-copy CPU views of
single tensors; `release(entry)` drops the pages of a tensor already copied, so that loading a
model never keeps a second copy of it resident. `write_file` streams tensors to disk one at a
time (the random-checkpoint writer uses it for a 1.2 GB model with two tensors in RAM).
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import struct
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from evokernel.errors import CheckpointError

# Every dtype the format defines, with its size in bytes (to check data offsets).
DTYPE_SIZES: dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
}
# The dtypes model weights may have on disk; anything else is refused by the loader.
TORCH_DTYPES: dict[str, torch.dtype] = {
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
}
# Every dtype a tensor may be read or written as (packed quantized weights add these).
STORAGE_DTYPES: dict[str, torch.dtype] = TORCH_DTYPES | {
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "F8_E4M3": torch.float8_e4m3fn,
}
SAFETENSORS_NAMES: dict[torch.dtype, str] = {v: k for k, v in STORAGE_DTYPES.items()}
MAX_HEADER_BYTES = 100_000_000  # the reference implementation's limit
_ALIGN = 8  # data buffer starts 8-byte aligned (header padded with spaces), as safetensors does


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str  # safetensors name: "BF16", "F16", "F32", ...
    shape: tuple[int, ...]
    begin: int  # byte offsets into the data buffer
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class Header:
    path: Path
    data_start: int  # absolute file offset of the data buffer (8 + N)
    file_size: int
    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]


def read_header(path: Path) -> Header:
    """Parse and check one file's header; every defect is a one-line `CheckpointError`."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise CheckpointError(
                    f"{path}: truncated safetensors file ({size} bytes, no 8-byte header length)"
                )
            (n,) = struct.unpack("<Q", prefix)
            if n > MAX_HEADER_BYTES:
                raise CheckpointError(
                    f"{path}: corrupt header: header length {n} exceeds the "
                    f"{MAX_HEADER_BYTES}-byte limit"
                )
            if 8 + n > size:
                raise CheckpointError(
                    f"{path}: truncated or corrupt: header length {n} runs past the end of the "
                    f"file ({size} bytes)"
                )
            raw = f.read(n)
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err.strerror or err})") from None
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as err:  # as in config.read_json_object
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: corrupt header: not valid JSON ({msg})") from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: corrupt header: expected a JSON object")
    metadata = obj.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{path}: corrupt header: __metadata__ is not an object")
    data_start = 8 + n
    data_size = size - data_start
    tensors = {name: _entry(path, name, spec, data_size) for name, spec in obj.items()}
    _check_no_overlap(path, tensors.values())
    return Header(path, data_start, size, tensors, {str(k): str(v) for k, v in metadata.items()})


def _entry(path: Path, name: str, spec: object, data_size: int) -> TensorEntry:
    where = f"{path}: tensor {name!r}"
    if not isinstance(spec, dict):
        raise CheckpointError(f"{where}: corrupt header entry (expected an object)")
    dtype, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if dtype not in DTYPE_SIZES:
        raise CheckpointError(f"{where}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        raise CheckpointError(f"{where}: corrupt header: bad shape {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_uint, offsets))):
        raise CheckpointError(f"{where}: corrupt header: bad data_offsets {offsets!r}")
    begin, end = offsets
    want = math.prod(shape) * DTYPE_SIZES[dtype]
    if end - begin != want:
        raise CheckpointError(
            f"{where}: corrupt header: data_offsets [{begin}, {end}] hold {end - begin} bytes, "
            f"but {dtype}{shape} needs {want}"
        )
    if end > data_size:
        raise CheckpointError(
            f"{where}: truncated file: data ends at byte {end} of the data buffer, "
            f"which holds only {data_size} bytes"
        )
    return TensorEntry(name, dtype, tuple(shape), begin, end)


def _is_uint(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check_no_overlap(path: Path, entries: Iterable[TensorEntry]) -> None:
    last: TensorEntry | None = None
    for e in sorted((e for e in entries if e.nbytes), key=lambda e: e.begin):
        if last is not None and e.begin < last.end:
            raise CheckpointError(
                f"{path}: corrupt header: tensors {last.name!r} and {e.name!r} overlap"
            )
        last = e


class TensorMap:
    """A checked file, memory-mapped copy-on-write; `view(name)` is a zero-copy CPU tensor."""

    def __init__(self, header: Header) -> None:
        self.header = header
        try:
            with header.path.open("rb") as f:
                # ACCESS_COPY: private and writable, so torch.frombuffer needs no read-only
                # warning; nothing writes to it, so no page is ever copied.
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        except (OSError, ValueError) as err:  # gone since its header was read, or unmappable
            raise CheckpointError(f"{header.path}: cannot map ({err})") from None

    def view(self, name: str) -> torch.Tensor:
        e = self.header.tensors[name]
        dtype = STORAGE_DTYPES[e.dtype]
        start = self.header.data_start + e.begin
        count = math.prod(e.shape)
        if count == 0:
            return torch.empty(e.shape, dtype=dtype)
        if start % DTYPE_SIZES[e.dtype]:
            # A misaligned tensor (legal in the format, never written by safetensors): copy just
            # this one tensor into an aligned buffer.
            buf = bytearray(self._mm[start : start + e.nbytes])
            return torch.frombuffer(buf, dtype=dtype).view(e.shape)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.frombuffer(self._mm, dtype=dtype, count=count, offset=start)
        return flat.view(e.shape)

    def release(self, name: str, rows: tuple[int, int] | None = None) -> None:
        """Drop the resident pages of a tensor (or of its rows [r0, r1)) once copied.

        The pages stay in the page cache; a later read maps them again.
        """
        if not hasattr(mmap, "MADV_DONTNEED"):
            return
        e = self.header.tensors[name]
        begin, end = self.header.data_start + e.begin, self.header.data_start + e.end
        if rows is not None and e.shape:
            row_bytes = e.nbytes // e.shape[0] if e.shape[0] else 0
            begin, end = begin + rows[0] * row_bytes, begin + rows[1] * row_bytes
        page = mmap.PAGESIZE
        start = begin // page * page
        if end > start:
            self._mm.madvise(mmap.MADV_DONTNEED, start, end - start)

    def close(self) -> None:
        # BufferError: a caller still holds a view; the mapping goes with the last view.
        with contextlib.suppress(BufferError):
            self._mm.close()


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


def write_file(
    path: Path,
    specs: list[TensorSpec],
    produce: Callable[[TensorSpec], torch.Tensor],
    metadata: dict[str, str] | None = None,
) -> int:
    """Write `specs` in order, calling `produce(spec)` for each tensor; returns bytes written.

    The header is computed from the specs first, so tensors are streamed: RAM holds the tensor
    being written and the next one, produced meanwhile on a helper thread.
    """
    header: dict[str, object] = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for s in specs:
        header[s.name] = {
            "dtype": SAFETENSORS_NAMES[s.dtype],
            "shape": list(s.shape),
            "data_offsets": [offset, offset + s.nbytes],
        }
        offset += s.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % _ALIGN)
    tmp = path.with_name(path.name + ".partial")
    try:
        _stream(tmp, raw, specs, produce)
        os.replace(tmp, path)
    except BaseException:  # a full disk or Ctrl-C: leave no half-written file behind
        tmp.unlink(missing_ok=True)
        raise
    return 8 + len(raw) + offset


def _stream(
    tmp: Path, raw: bytes, specs: list[TensorSpec], produce: Callable[[TensorSpec], torch.Tensor]
) -> None:
    # The next tensor is produced while this one is written: at most two are in memory.
    with tmp.open("wb") as f, ThreadPoolExecutor(max_workers=1) as ahead:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        pending = ahead.submit(produce, specs[0]) if specs else None
        for k, s in enumerate(specs):
            assert pending is not None
            t = pending.result()
            pending = ahead.submit(produce, specs[k + 1]) if k + 1 < len(specs) else None
            if t.dtype != s.dtype or tuple(t.shape) != s.shape:
                raise ValueError(f"{s.name}: produced {t.dtype}{list(t.shape)}, want {s}")
            f.write(t.contiguous().reshape(-1).view(torch.uint8).numpy().data)
            del t
