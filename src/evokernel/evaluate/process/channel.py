"""The private channel between the evaluator and a worker: framed JSON plus raw tensor bytes.

The worker runs candidate code, so everything it sends is untrusted. Nothing here unpickles:
a message is one JSON document (`send_bytes` frame) whose tensors are replaced by
`{"__tensor__": i}` markers, followed by one frame of raw bytes per tensor. The reader checks
every tensor's dtype against an allowlist and its byte count against its shape before it builds
a CPU tensor, and caps frame sizes. The channel is a socket pair created by the parent; the
worker receives its end as an inherited file descriptor, never through stdout.

Every string that arrives is valid Unicode text: JSON can carry lone surrogates (`"\\ud800"`,
say in a candidate's exception message), which no later stage could print, store or encode, so
they become `?`. Nesting too deep to decode makes the message malformed.
"""

from __future__ import annotations

import json
import math
import socket
import sys
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

MAX_HEADER = 16 * 2**20
MAX_TENSOR = 4 * 2**30
DTYPE_NAMES = (
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
    "bool",
)  # fmt: skip


def dtype_of(name: str) -> torch.dtype:
    """The torch dtype named `name` ("torch.float32" or "float32"); ChannelError otherwise."""
    import torch

    short = name.removeprefix("torch.")
    if short not in DTYPE_NAMES:
        raise ChannelError(f"dtype {name!r:.40} is not allowed")
    return getattr(torch, short)


class ChannelError(Exception):
    """A malformed message (the worker broke the protocol)."""


class FatalError(Exception):
    """Raised in the worker when it must answer `fatal` and exit (its CUDA context is
    poisoned); `line` is the reason."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


def socket_pair() -> tuple[Connection, socket.socket]:
    """(the parent's connection, the child's socket to pass to the worker)."""
    parent, child = socket.socketpair()
    return Connection(parent.detach()), child


def connect(fd: int) -> Connection:
    """The worker's end, from the inherited descriptor."""
    return Connection(fd)


def _encode(obj: Any, tensors: list[torch.Tensor]) -> Any:
    torch = sys.modules.get("torch")  # no torch imported: no tensors to send
    if torch is not None and isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return {"__tensor__": len(tensors) - 1}
    if isinstance(obj, dict):
        return {str(k): _encode(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v, tensors) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"__float__": repr(obj)}
    return obj


def tensor_bytes(t: torch.Tensor) -> bytes:
    import torch

    flat = t.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    return flat.view(torch.uint8).numpy().tobytes()


def send(conn: Connection, message: dict[str, Any]) -> None:
    tensors: list[torch.Tensor] = []
    body = _encode(message, tensors)
    meta = [{"dtype": str(t.dtype), "shape": list(t.shape)} for t in tensors]
    conn.send_bytes(json.dumps({"body": body, "tensors": meta}).encode())
    for t in tensors:
        conn.send_bytes(tensor_bytes(t))


def _spec(meta: Any) -> tuple[torch.dtype, list[int], int]:
    """(dtype, shape, byte count) a tensor's metadata declares; ChannelError if malformed."""

    if not isinstance(meta, dict) or not isinstance(meta.get("dtype"), str):
        raise ChannelError(f"bad tensor metadata {meta!r:.200}")
    shape = meta.get("shape")
    if not isinstance(shape, list) or not all(
        type(n) is int and 0 <= n <= MAX_TENSOR for n in shape
    ):
        raise ChannelError(f"bad tensor shape {shape!r:.200}")
    dtype = dtype_of(meta["dtype"])
    return dtype, shape, math.prod(shape) * dtype.itemsize


def _tensor(dtype: torch.dtype, shape: list[int], raw: bytes) -> torch.Tensor:
    import torch

    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


def _decode(obj: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            index = obj["__tensor__"]
            if not isinstance(index, int) or not 0 <= index < len(tensors):
                raise ChannelError(f"bad tensor reference {index!r:.50}")
            return tensors[index]
        if set(obj) == {"__float__"}:
            return float(obj["__float__"])
        return {_text(k): _decode(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if isinstance(obj, str):
        return _text(obj)
    return obj


def _text(value: str) -> str:
    return value.encode("utf-8", "replace").decode("utf-8")


def recv(conn: Connection, max_total: int | None = None) -> dict[str, Any]:
    """One message. Raises EOFError when the other side is gone, ChannelError when malformed.
    Every tensor frame is read only up to the size its metadata declares; with `max_total`,
    a message whose tensors declare more bytes together is refused before any frame is read
    (the parent's cap on what a worker can make it hold)."""
    try:
        header = json.loads(conn.recv_bytes(MAX_HEADER))
    except (OSError, ValueError, RecursionError) as err:  # EOFError (peer gone) propagates
        raise ChannelError(f"unreadable message header: {err}") from None
    if not isinstance(header, dict) or not isinstance(header.get("tensors"), list):
        raise ChannelError("message without a tensor table")
    specs = [_spec(meta) for meta in header["tensors"]]
    total = sum(size for _, _, size in specs)
    if any(size > MAX_TENSOR for _, _, size in specs) or (
        max_total is not None and total > max_total
    ):
        limit = f"{MAX_TENSOR} each" + ("" if max_total is None else f", {max_total} in all")
        raise ChannelError(f"tensors of {total} bytes declared; the limit is {limit}")
    tensors = []
    for dtype, shape, size in specs:
        try:
            raw = conn.recv_bytes(size)
        except OSError as err:
            raise ChannelError(f"unreadable tensor frame: {err}") from None
        if len(raw) != size:
            raise ChannelError(f"tensor of shape {shape} and {dtype} arrived with {len(raw)} bytes")
        tensors.append(_tensor(dtype, shape, raw))
    try:
        body = _decode(header.get("body"), tensors)
    except RecursionError:
        raise ChannelError("message nested too deeply") from None
    if not isinstance(body, dict):
        raise ChannelError("message body is not an object")
    return body
