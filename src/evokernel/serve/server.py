"""Start the server: check the inputs, bind the port, start the engine, serve until a signal.

    code = run_server(ServeConfig(engine=EngineSettings(model_dir=...), port=8000))

Order, so that every mistake shows before the slow part: the tokenizer, the chat template and
the sampling defaults are read first; then the port is bound (a taken port is one line); then
the engine process loads the model, sizes the KV cache (a cache that does not fit is one line
naming what would) and captures its CUDA graphs; only then does the server print its address
(one line on stdout: `serving NAME on http://HOST:PORT ...`) and answer.

Shutdown (SIGTERM or Ctrl-C): uvicorn stops accepting connections at once and lets in-flight
requests finish for up to `shutdown_timeout_s`, then cancels the rest (each leaves the engine's
batch at its next step); the engine process is stopped, and the exit code is 0 (130 after
Ctrl-C). /health answers 503 from the signal on.
"""

from __future__ import annotations

import logging
import math
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from evokernel.errors import ConfigError, EvokernelError
from evokernel.serve.scheduler import EngineSettings


@dataclass(frozen=True)
class ServeConfig:
    engine: EngineSettings
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = field(default=None, repr=False)  # never printed
    max_queue: int = 256
    shutdown_timeout_s: float = 30.0
    served_name: str | None = None
    chat_template: Path | None = None
    start_timeout_s: float = 1800.0
    access_log: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be in 0..65535, got {self.port}")
        if self.max_queue < 0:
            raise ConfigError(f"--max-queue must be >= 0, got {self.max_queue}")
        if self.shutdown_timeout_s < 0:
            raise ConfigError(f"--shutdown-timeout must be >= 0, got {self.shutdown_timeout_s:g}")


def build_served(config: ServeConfig) -> Any:
    from evokernel.engine.loading import load_tokenizer
    from evokernel.model.config import ModelConfig
    from evokernel.serve.chat_template import load_chat_template
    from evokernel.serve.jobs import Sampling, Served

    model_dir = Path(config.engine.model_dir)
    cfg = ModelConfig.from_dir(model_dir)
    tokenizer = load_tokenizer(model_dir)
    if tokenizer is None:
        raise ConfigError(f"{model_dir}: serving needs the checkpoint's tokenizer.json")
    name = config.served_name or model_dir.resolve().name
    return Served(
        name=name,
        aliases=frozenset({str(config.engine.model_dir), str(model_dir.resolve())}),
        tokenizer=tokenizer,
        template=load_chat_template(model_dir, config.chat_template),
        max_len=config.engine.max_len,
        vocab_size=cfg.vocab_size,
        eos_ids=frozenset(cfg.eos_token_ids),
        defaults=Sampling.from_checkpoint(model_dir),
    )


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, TCP with Nagle's algorithm off.

    asyncio turns Nagle off on each accepted connection only when the socket's protocol is
    IPPROTO_TCP, and a socket made with protocol 0 (the default) is not; with Nagle on, a
    response written as headers then body waits for the client's delayed ACK of the headers
    (40 ms on Linux) on every kept-alive connection: every streamed request's first token, and
    every non-streamed answer, 40 ms late. So the protocol is named, and TCP_NODELAY is set on
    the listener too (Linux passes it to accepted connections), whatever the event loop."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise EvokernelError(f"cannot listen on {host}:{port}: {err.strerror}") from None
    # Listening now: a client that connects after the ready line and before uvicorn's loop
    # runs waits in the backlog instead of being refused.
    sock.listen(2048)
    return sock


def run_server(config: ServeConfig) -> int:
    import uvicorn

    from evokernel.serve.app import ServerState, build_app
    from evokernel.serve.engine_client import EngineClient
    from evokernel.serve.gc_clock import GcClock, settle
    from evokernel.serve.metrics import Metrics

    served = build_served(config)
    sock = bind(config.host, config.port)
    gc_clock = GcClock()
    metrics = Metrics(config.engine.max_batch, gc_clock)
    engine = EngineClient(config.engine, on_stats=metrics.engine_stats)
    try:
        info = engine.start(config.start_timeout_s)
        settle()  # the tokenizer, template and app live as long as the process: never walk them
        state = ServerState(engine, served, metrics, config.api_key, config.max_queue)
        host, port = sock.getsockname()[:2]
        where = info["gpu"] or info["device"]
        print(
            f"serving {served.name} on http://{_url_host(host)}:{port} ({where}, {info['dtype']}, "
            f"max-batch {info['max_batch']}, max-len {info['max_len']}, "
            f"{info['cuda_graphs']} CUDA graphs, KV {info['kv_bytes'] / 2**30:.2f} GiB, "
            f"chat template {'yes' if served.template else 'none'}, "
            f"API key {'required' if config.api_key else 'off'}; started in "
            f"{info['start_s']:.1f} s)",
            flush=True,
        )
        uv_config = uvicorn.Config(
            build_app(state),
            log_level="warning",
            access_log=config.access_log,
            lifespan="on",
            timeout_graceful_shutdown=math.ceil(config.shutdown_timeout_s),
        )
        if config.access_log:  # uvicorn's access lines are INFO; everything else stays quiet
            logging.getLogger("uvicorn.access").setLevel(logging.INFO)
        server = _server(uv_config, state)
        caught: list[int] = []
        previous = {s: signal.signal(s, lambda sig, _f: caught.append(sig)) for s in _SIGNALS}
        try:
            server.run(sockets=[sock])
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        if not server.started:
            raise EvokernelError("the HTTP server did not start (see the messages above)")
        print("stopped", file=sys.stderr, flush=True)
        return 130 if signal.SIGINT in server.signals else 0
    finally:
        engine.kill()
        sock.close()


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _server(config: Any, state: Any) -> Any:
    """uvicorn's server, marking the state as draining as soon as a signal arrives."""
    import uvicorn

    class Server(uvicorn.Server):
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.signals: list[int] = []

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            state.draining = True
            self.signals.append(sig)
            super().handle_exit(sig, frame)

    return Server(config)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
