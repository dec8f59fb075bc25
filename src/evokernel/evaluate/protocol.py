"""The evaluator's trust boundary, typed: every message between the parent and a worker.

Requests go from the parent (trusted) to a worker; replies come back from a process that runs
candidate code, so every reply is untrusted input. One codec for both directions:
`send(conn, message)` turns a dataclass into JSON plus raw tensor frames (process/channel.py:
nothing is ever unpickled); `recv(conn, kinds)` reads one message and builds the dataclass,
refusing with a `ProtocolError` that says what is wrong and where (an unknown or unexpected
`op`, a missing or unknown field, a field of the wrong type, a tensor subclass). A field typed
`Tensor` must hold exactly a `torch.Tensor` rebuilt by the channel (dtype allowlist, byte count
checked against the shape). The parent reads a reply with `max_total=MAX_REPLY_BYTES`: a worker
can write frames onto the channel itself, and without a cap a few reused buffers could make
the parent hold any number of gigabytes.

  parent -> worker                      worker -> parent
  Init (trusted set-up, device untouched) Ready | Error
  Warm (device set-up, warm-up kernels,   Warmed | Error
        the guards' snapshot; or one public
        scenario's baselines called once)
  Load (import the candidate)           Loading (acknowledged: candidate code runs from now
                                        on), then Loaded | Fatal | Error
  Check (one correctness job)           Checked | Fatal | Error
  Prepare (build timing inputs)         Prepared | Fatal | Error
  Time (one scenario's timed rounds)    Timed | Fatal | Error
  Profile (profiler pass)               Profiled | Fatal | Error
  Calibrate (copy bandwidth)            Calibrated | Error
  Call (run_isolated)                   Called | Error
  Exit                                  -
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
import typing
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, Union

from evokernel.evaluate.process import channel

# The tensors of one worker reply together: a correctness job's outputs (three calls) or a
# timed scenario's rechecks. Decode outputs are kilobytes to megabytes.
MAX_REPLY_BYTES = 512 << 20

if TYPE_CHECKING:
    from torch import Tensor
else:

    class Tensor:
        """Stands for torch.Tensor in field types (torch is imported only where needed)."""


class ProtocolError(channel.ChannelError):
    """A message that does not follow the protocol; the text says what and where."""


@dataclass(frozen=True)
class Message:
    op: ClassVar[str] = ""


# --- requests (parent -> worker) ---------------------------------------------------------------


@dataclass(frozen=True)
class Init(Message):
    """Trusted set-up that does not touch the device (imports, the task, thread counts). mode
    "eval" (a candidate follows), "calibrate" (never a candidate) or "call" (run_isolated:
    nothing to set up, no `Warm`)."""

    op: ClassVar[str] = "init"
    mode: str
    task: str = ""
    device: str = "cpu"
    dtype: str = ""
    device_memory_mb: int = 0
    threads: int = 1


@dataclass(frozen=True)
class Warm(Message):
    """The device part of the trusted set-up: warm-up kernels, the GPU spin rate, the guards'
    install and snapshot (the CUDA context and other host-side set-up came with `Init`). Its
    own request so that the parent can hold the device's shared lock for it (locks.py): no
    worker's start-up runs GPU work while a candidate is timed.

    With `scenario` (CUDA, before the Warm that finishes the set-up): only call each baseline
    once on that public scenario's inputs at the timed dtype, untimed. A library may set up per
    shape on its first call (cuDNN's SDPA: up to 1.4 s per attention shape in a fresh process),
    so a pool worker does it before a candidate arrives, one scenario per request: each holds
    the shared lock briefly, and none of it lands in an evaluation's own time."""

    op: ClassVar[str] = "warm"
    scenario: str = ""


@dataclass(frozen=True)
class Load(Message):
    op: ClassVar[str] = "load"
    path: str
    entry: str


@dataclass(frozen=True)
class Check(Message):
    op: ClassVar[str] = "check"
    scenario: str
    hidden_seed: int | None
    seed: int
    dtype: str
    perturb_seed: int | None
    repeat: bool


@dataclass(frozen=True)
class Time(Message):
    """One scenario's timed phase: the whole schedule, chosen by the parent."""

    op: ClassVar[str] = "time"
    scenario: str
    dtype: str
    rounds: list[list[str]]
    timed_from: int
    recheck: list[int]
    base_seeds: list[int]
    copies: int
    perturb_seed: int


@dataclass(frozen=True)
class Prepare(Message):
    """Build `timing`'s inputs now (before the exclusive timed phase)."""

    op: ClassVar[str] = "prepare"
    timing: Time


@dataclass(frozen=True)
class Profile(Message):
    op: ClassVar[str] = "profile"
    scenario: str
    dtype: str
    seed: int
    calls: int


@dataclass(frozen=True)
class Calibrate(Message):
    op: ClassVar[str] = "calibrate"


@dataclass(frozen=True)
class Call(Message):
    op: ClassVar[str] = "call"
    path: str
    function: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Exit(Message):
    op: ClassVar[str] = "exit"


# --- replies (worker -> parent; untrusted) -----------------------------------------------------


@dataclass(frozen=True)
class DeviceFacts:
    kind: str
    name: str
    torch: str
    triton: str
    sm_count: int = 0
    l2_bytes: int = 0
    total_memory: int = 0


@dataclass(frozen=True)
class Ready(Message):
    op: ClassVar[str] = "ready"
    pid: int
    sandbox: list[str]


@dataclass(frozen=True)
class Warmed(Message):
    op: ClassVar[str] = "warmed"
    device: DeviceFacts | None = None


@dataclass(frozen=True)
class Loading(Message):
    """The worker received `Load` and is about to import the candidate: from here on, a fault
    is the candidate's; before it, the infrastructure's."""

    op: ClassVar[str] = "loading"


@dataclass(frozen=True)
class Loaded(Message):
    op: ClassVar[str] = "loaded"
    reason: str | None
    problems: list[str]


@dataclass(frozen=True)
class CallRecord:
    """One call of a correctness job: its output, or the reason it has none."""

    step: str  # "same" | "perturbed"
    mutated: list[str]
    reason: str | None = None
    type: str | None = None  # the exact type of the result, "torch.Tensor" for a tensor
    device: str | None = None
    out: Tensor | None = None


@dataclass(frozen=True)
class Checked(Message):
    op: ClassVar[str] = "checked"
    records: list[CallRecord]
    problems: list[str]


@dataclass(frozen=True)
class Prepared(Message):
    op: ClassVar[str] = "prepared"
    problems: list[str]


@dataclass(frozen=True)
class Series:
    """Raw per-call figures of one implementation in one scenario (microseconds)."""

    event_us: list[float] = field(default_factory=list)
    tail_us: list[float] = field(default_factory=list)
    enqueue_us: list[float] = field(default_factory=list)
    xhost_us: list[float] = field(default_factory=list)
    xevent_us: list[float] = field(default_factory=list)
    xbatch: list[int] = field(default_factory=list)  # cross-check batch of each x* call


@dataclass(frozen=True)
class Recheck:
    round: int
    counter: int
    out: Tensor


@dataclass(frozen=True)
class Timed(Message):
    """A scenario's raw timings; or `reason` (and the `implementation` whose call failed)."""

    op: ClassVar[str] = "timed"
    problems: list[str]
    series: dict[str, Series] = field(default_factory=dict)
    rechecks: list[Recheck] = field(default_factory=list)
    spin_us: float = 0.0
    reason: str | None = None
    implementation: str | None = None
    rounds_s: float = 0.0  # the worker's wall seconds in the timed rounds (the rest: overhead)


@dataclass(frozen=True)
class GpuEvent:
    name: str
    cat: str
    stream: int | None
    ts: float
    dur: float


@dataclass(frozen=True)
class Profiled(Message):
    op: ClassVar[str] = "profiled"
    problems: list[str]
    events: list[GpuEvent] = field(default_factory=list)
    reason: str | None = None


@dataclass(frozen=True)
class Calibrated(Message):
    op: ClassVar[str] = "calibrated"
    copy_gbps: float
    problems: list[str]


@dataclass(frozen=True)
class Called(Message):
    op: ClassVar[str] = "called"
    value: Any = None
    error: str | None = None
    traceback: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Fatal(Message):
    """The worker is unusable (its CUDA context is poisoned); it exits after sending this."""

    op: ClassVar[str] = "fatal"
    reason: str


@dataclass(frozen=True)
class Error(Message):
    """The harness itself failed in the worker (an infrastructure fault, not the candidate's)."""

    op: ClassVar[str] = "error"
    detail: str
    sandbox: list[str] = field(default_factory=list)


REQUESTS: tuple[type[Message], ...] = (
    Init, Warm, Load, Check, Prepare, Time, Profile, Calibrate, Call, Exit,
)  # fmt: skip
REPLIES: tuple[type[Message], ...] = (
    Ready, Warmed, Loading, Loaded, Checked, Prepared, Timed, Profiled, Calibrated, Called, Fatal,
    Error,
)  # fmt: skip
M = TypeVar("M", bound=Message)


# --- the codec ---------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Dataclasses to dicts, recursively; tensors and everything else as they are (the channel
    sends tensors as raw frames)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def to_wire(message: Message) -> dict[str, Any]:
    return {"op": message.op, **_plain(message)}


def send(conn: Connection, message: Message) -> None:
    channel.send(conn, to_wire(message))


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls, vars(sys.modules[__name__]))
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _kind(value: Any) -> str:
    return type(value).__name__


def _value(value: Any, hint: Any, where: str) -> Any:
    """`value` checked against the type `hint` (dataclasses built from dicts)."""
    if hint is Any:
        return value
    if hint is Tensor:
        torch = sys.modules.get("torch")
        if torch is None or type(value) is not torch.Tensor:
            raise ProtocolError(f"{where} must be a tensor, got {_kind(value)}")
        return value
    if hint is type(None):
        if value is not None:
            raise ProtocolError(f"{where} must be null, got {_kind(value)}")
        return None
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _value(value, option, where)
            except ProtocolError as err:
                errors.append(str(err))
        raise ProtocolError(errors[0] if len(errors) == 1 else f"{where}: {'; '.join(errors)}")
    if origin is list:
        if not isinstance(value, list):
            raise ProtocolError(f"{where} must be a list, got {_kind(value)}")
        (item,) = typing.get_args(hint)
        return [_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ProtocolError(f"{where} must be an object, got {_kind(value)}")
        _key, item = typing.get_args(hint)
        return {str(k): _value(v, item, f"{where}[{k!r:.40}]") for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ProtocolError(f"{where} must be an object, got {_kind(value)}")
        return _build(hint, value, where)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(f"{where} must be a number, got {_kind(value)}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError(f"{where} must be an integer, got {_kind(value)}")
        return value
    if hint in (str, bool):
        if type(value) is not hint:
            raise ProtocolError(f"{where} must be a {hint.__name__}, got {_kind(value)}")
        return value
    raise ProtocolError(f"{where}: no rule for the type {hint!r}")  # a bug in this module


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    hints = _hints(cls)
    unknown = sorted(set(data) - set(hints))
    if unknown:
        raise ProtocolError(f"{where}: unknown field {unknown[0]!r:.60}")
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required:
                raise ProtocolError(f"{where}: missing field {f.name!r}")
            continue
        values[f.name] = _value(data[f.name], hints[f.name], f"{where}.{f.name}")
    return cls(**values)


def from_wire(data: dict[str, Any], kinds: tuple[type[M], ...]) -> M:
    """The message `data` holds, which must be one of `kinds`; ProtocolError otherwise."""
    op = data.get("op")
    known = {k.op: k for k in kinds}
    if not isinstance(op, str) or op not in known:
        expected = " or ".join(repr(k) for k in known)
        raise ProtocolError(f"expected a {expected} message, got op {op!r:.40}")
    body = {k: v for k, v in data.items() if k != "op"}
    return typing.cast(M, _build(known[op], body, f"{op!r} message"))


def recv(conn: Connection, kinds: tuple[type[M], ...], max_total: int | None = None) -> M:
    """One message of one of `kinds`, its tensors `max_total` bytes at most together (None: no
    cap beyond the channel's per-tensor one). EOFError when the peer is gone; ChannelError (a
    ProtocolError for a well-framed but wrong message) when it broke the protocol."""
    return from_wire(channel.recv(conn, max_total), kinds)
