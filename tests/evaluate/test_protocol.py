"""The typed parent/worker protocol: every message survives the channel, and a malformed one is
refused with a reason that says what is wrong and where."""

from __future__ import annotations

import pytest
import torch

from evokernel.evaluate import protocol as p
from evokernel.evaluate.process import channel

TIMED = p.Time("s", "torch.float32", [["candidate"]], 0, [0], [1, 2], 2, 3)
MESSAGES: list[p.Message] = [
    p.Init(mode="eval", task="t", device="cpu", dtype="torch.float32", threads=2),
    p.Load(path="/x/candidate.py", entry="attention"),
    p.Check("s", None, 5, "torch.float16", 7, True),
    p.Prepare(timing=TIMED),
    TIMED,
    p.Profile("s", "torch.float32", 4, 3),
    p.Call("/f.py", "evaluate", ["a", 1], {"k": [1.5]}),
    p.Exit(),
    p.Warm(),
    p.Warm(scenario="b1_ctx512"),
    p.Ready(pid=3, sandbox=["landlock v7"]),
    p.Warmed(device=p.DeviceFacts("cpu", "x86", "2", "3")),
    p.Loading(),
    p.Loaded(reason=None, problems=["patched: x"]),
    p.Checked([p.CallRecord("same", ["q"], None, "torch.Tensor", "cpu", torch.ones(2, 3))], []),
    p.Timed(
        [],
        {"candidate": p.Series([1.0], [2.0], [3.0], [], [])},
        [p.Recheck(0, 4, torch.zeros(3, dtype=torch.float16))],
        30.0,
    ),
    p.Profiled([], [p.GpuEvent("k", "kernel", 7, 1.0, 2.0)]),
    p.Calibrated(copy_gbps=3000.0, problems=[]),
    p.Called(value={"score": 1}),
    p.Fatal(reason="cuda-error: x"),
    p.Error(detail="Traceback ..."),
]


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(_same(getattr(a, f), getattr(b, f)) for f in vars(a))
    return a == b


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.op)
def test_every_message_survives_the_channel(message: p.Message) -> None:
    parent, child = channel.socket_pair()
    other = channel.connect(child.detach())
    p.send(other, message)
    got = p.recv(parent, p.REQUESTS + p.REPLIES)
    assert _same(message, got)


EXTRA: dict[str, tuple[type[p.Message], ...]] = {"ready": (p.Ready,), "timed": (p.Timed,)}


@pytest.mark.parametrize(
    ("wire", "says"),
    [
        ({"op": "checked", "records": "all good", "problems": []},
         "'checked' message.records must be a list, got str"),
        ({"op": "checked", "records": [{"step": 1, "mutated": []}], "problems": []},
         "records[0].step must be a str, got int"),
        ({"op": "checked", "problems": []}, "missing field 'records'"),
        ({"op": "checked", "records": [], "problems": [], "verdict": "correct"},
         "unknown field 'verdict'"),
        ({"op": "ready", "pid": True, "sandbox": []}, "pid must be an integer, got bool"),
        ({"op": "timed", "problems": [], "series": {"candidate": {"event_us": ["1"]}}},
         "series['candidate'].event_us[0] must be a number, got str"),
        ({"op": "loaded", "reason": None, "problems": [], "op2": 1}, "unknown field 'op2'"),
        ({"op": "correct"}, "expected a 'checked' or 'fatal' or 'loaded' message, got op"),
        ({"records": []}, "got op None"),
    ],
)  # fmt: skip
def test_a_malformed_message_is_refused_with_its_reason(wire: dict, says: str) -> None:
    with pytest.raises(p.ProtocolError) as err:
        p.from_wire(wire, (p.Checked, p.Fatal, p.Loaded, *EXTRA.get(str(wire.get("op")), ())))
    assert says in str(err.value)


def test_a_tensor_field_takes_only_a_plain_tensor() -> None:
    class Sneaky(torch.Tensor):
        pass

    record = {"step": "same", "mutated": [], "out": torch.ones(2).as_subclass(Sneaky)}
    with pytest.raises(p.ProtocolError, match="out must be a tensor, got Sneaky"):
        p.from_wire({"op": "checked", "records": [record], "problems": []}, (p.Checked,))
    record["out"] = [1.0, 2.0]
    with pytest.raises(p.ProtocolError, match="out must be a tensor, got list"):
        p.from_wire({"op": "checked", "records": [record], "problems": []}, (p.Checked,))
