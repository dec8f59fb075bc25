"""The server's listening socket (serve/server.py `bind`): TCP with Nagle's algorithm off, so
that a response written as headers then body is not held for the client's delayed ACK (40 ms
on Linux on every kept-alive connection, measured before this was fixed)."""

from __future__ import annotations

import socket

from evokernel.serve.server import bind


def test_the_listener_is_tcp_with_nodelay_and_passes_it_to_connections():
    listener = bind("127.0.0.1", 0)
    try:
        assert listener.proto == socket.IPPROTO_TCP  # asyncio sets NODELAY only then
        assert listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        with client, accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        listener.close()
