"""The private channel: tensors and JSON round-trip; malformed or pickled frames are refused."""

from __future__ import annotations

import json
import math
import pickle

import pytest
import torch

from evokernel.evaluate.process import channel


def pair():
    parent, child_sock = channel.socket_pair()
    return parent, channel.connect(child_sock.detach())


@pytest.mark.parametrize(
    "tensor",
    [
        torch.randn(3, 4),
        torch.randn(2, 5).to(torch.bfloat16),
        torch.arange(6, dtype=torch.int32).reshape(2, 3)[:, 1:],  # not contiguous
        torch.empty(0, 7),
        torch.tensor(2.5, dtype=torch.float16),
        torch.tensor([True, False]),
    ],
)
def test_tensors_round_trip_bit_exact(tensor: torch.Tensor) -> None:
    a, b = pair()
    channel.send(a, {"op": "x", "t": tensor, "nested": [1, {"u": tensor}]})
    got = channel.recv(b)
    for t in (got["t"], got["nested"][1]["u"]):
        assert t.dtype == tensor.dtype and t.shape == tensor.shape
        assert torch.equal(t, tensor)


def test_non_finite_floats() -> None:
    a, b = pair()
    channel.send(a, {"x": [math.inf, -math.inf, math.nan, 1.0]})
    x = channel.recv(b)["x"]
    assert x[0] == math.inf and x[1] == -math.inf and math.isnan(x[2]) and x[3] == 1.0


def test_pickles_and_lies_are_refused() -> None:
    a, b = pair()
    a.send_bytes(pickle.dumps({"op": "ready"}))
    with pytest.raises(channel.ChannelError):
        channel.recv(b)
    header = {"body": {"t": {"__tensor__": 0}}, "tensors": [{"dtype": "float32", "shape": [4]}]}
    a.send_bytes(__import__("json").dumps(header).encode())
    a.send_bytes(b"\x00" * 3)  # 4 float32 need 16 bytes
    with pytest.raises(channel.ChannelError):
        channel.recv(b)
    header["tensors"] = [{"dtype": "object", "shape": [1]}]
    a.send_bytes(__import__("json").dumps(header).encode())
    a.send_bytes(b"\x00" * 8)
    with pytest.raises(channel.ChannelError):
        channel.recv(b)


def test_closed_peer_is_eof() -> None:
    a, b = pair()
    a.close()
    with pytest.raises(EOFError):
        channel.recv(b)


def test_lone_surrogates_arrive_as_text() -> None:
    a, b = pair()
    channel.send(a, {"op": "error", "message": "x\ud800y", "\udfff": ["\ud83d"]})
    got = channel.recv(b)
    assert got == {"op": "error", "message": "x?y", "?": ["?"]}


def test_nesting_too_deep_is_malformed() -> None:
    a, b = pair()
    depth = 100_000
    a.send_bytes(('{"body": ' + "[" * depth + "]" * depth + ', "tensors": []}').encode())
    with pytest.raises(channel.ChannelError):
        channel.recv(b)


def test_declared_bytes_over_the_cap_are_refused_before_any_frame() -> None:
    a, b = pair()
    t = torch.zeros(1024, dtype=torch.uint8)
    channel.send(a, {"op": "x", "ts": [t, t, t]})
    assert len(channel.recv(b, max_total=3 * 1024)["ts"]) == 3
    channel.send(a, {"op": "x", "ts": [t, t, t]})
    with pytest.raises(channel.ChannelError, match=r"3072 bytes declared; .* 3071 in all"):
        channel.recv(b, max_total=3 * 1024 - 1)
    a, b = pair()  # the refused message's frames are still in the old one
    huge = {"body": {}, "tensors": [{"dtype": "uint8", "shape": [1 << 20, 1 << 20]}]}
    a.send_bytes(json.dumps(huge).encode())  # no frame follows: the header alone is refused
    with pytest.raises(channel.ChannelError, match="declared"):
        channel.recv(b)


def test_a_frame_longer_than_declared_is_not_read() -> None:
    a, b = pair()
    header = {"body": {}, "tensors": [{"dtype": "uint8", "shape": [4]}]}
    a.send_bytes(json.dumps(header).encode())
    a.send_bytes(b"\x00" * 64)
    with pytest.raises(channel.ChannelError, match="unreadable tensor frame"):
        channel.recv(b)
