"""`evokernel serve`: an OpenAI-compatible HTTP server over the engine, batching requests.

    evokernel serve --model DIR [--kernels PACK] [--host 127.0.0.1] [--port 8000]
        [--max-batch 32] [--max-len L] [--max-queue 256] [--api-key-env VAR]
        [--device cuda|cpu] [--dtype D] [--ops torch|triton] [--no-pdl] [--no-graph]
        [--served-model-name NAME] [--chat-template FILE] [--prefill-budget TOKENS]
        [--prefill-rows N] [--shutdown-timeout S] [--seed S] [--access-log]

Needs the `serve` extra (`pip install 'evokernel[serve]'`). Prints one line when it is ready
(`serving NAME on http://HOST:PORT ...`); stops on SIGTERM or Ctrl-C (docs/serve.md).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from evokernel.cli import args as checked
from evokernel.cli.generate import add_engine_args
from evokernel.errors import ConfigError

ORDER = 25
DEFAULT_MAX_LEN = 4096


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="OpenAI-compatible server (/v1/chat/completions, /v1/completions), batching requests",
        description=(
            "Serve a checkpoint over HTTP with the OpenAI API: /v1/models, /v1/completions, "
            "/v1/chat/completions (streaming too), /health, /metrics. Concurrent requests "
            "share decode steps (continuous batching over --max-batch KV slots of --max-len "
            "positions, one CUDA graph per batch and context bucket). Needs evokernel[serve]."
        ),
    )
    p.add_argument("--model", required=True, metavar="DIR", help="checkpoint directory")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", default="8000", metavar="P", help="port (default 8000; 0: any free)")
    p.add_argument(
        "--max-batch", default="32", metavar="N", help="sequences decoded together (default 32)"
    )
    p.add_argument(
        "--max-len",
        default=None,
        metavar="L",
        help=f"context of each sequence, prompt + completion (default {DEFAULT_MAX_LEN}, at "
        "most the model's); the KV cache holds max-batch x max-len positions",
    )
    p.add_argument(
        "--max-queue",
        default="256",
        metavar="N",
        help="requests waiting beyond the running batch before 429 (default 256)",
    )
    p.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="require `Authorization: Bearer KEY` on /v1/*, KEY read from this variable",
    )
    add_engine_args(p)
    p.add_argument("--no-graph", action="store_true", help="decode eagerly on CUDA")
    p.add_argument("--served-model-name", metavar="NAME", help="default: the directory's name")
    p.add_argument(
        "--chat-template",
        metavar="FILE",
        help="Jinja chat template file, or `chatml` for the built-in one (default: the "
        "checkpoint's own)",
    )
    p.add_argument(
        "--prefill-budget",
        default="8192",
        metavar="TOKENS",
        help="prompt tokens prefilled between two decode steps (at least one prompt), and the "
        "staging area the prefill graphs write them into (default 8192)",
    )
    p.add_argument(
        "--prefill-rows",
        default="8",  # engine/batching.py PREFILL_ROWS (not imported here: no torch at parse time)
        metavar="N",
        help="prompts of one length bucket prefilled together at most (CUDA; default 8; 1: "
        "each alone); each (prompts, length bucket) is a CUDA graph captured at start-up",
    )
    p.add_argument(
        "--shutdown-timeout",
        default="30",
        metavar="S",
        help="on SIGTERM, seconds in-flight requests may take before they are cancelled",
    )
    p.add_argument("--seed", default="0", metavar="S", help="seed of requests without one")
    p.add_argument("--access-log", action="store_true", help="log one line per request")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evokernel.cli.generate import kernels_dir, resolve_ops
    from evokernel.model.config import ModelConfig

    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        raise ConfigError(
            f"serve needs the serve extra ({err.name} is missing): pip install 'evokernel[serve]'"
        ) from None
    from evokernel.serve.chat_template import BUILT_IN
    from evokernel.serve.scheduler import EngineSettings
    from evokernel.serve.server import ServeConfig, run_server

    model_dir = checked.existing_dir(args.model, "--model")
    cfg = ModelConfig.from_dir(model_dir)
    limit = cfg.max_position_embeddings
    max_len = checked.integer(
        args.max_len if args.max_len is not None else min(DEFAULT_MAX_LEN, limit),
        "--max-len",
        lo=2,
        hi=limit,
    )
    template = None
    if args.chat_template is not None and args.chat_template not in BUILT_IN:
        template = checked.regular_file(args.chat_template, "--chat-template")
    elif args.chat_template is not None:
        template = Path(args.chat_template)
    settings = EngineSettings(
        model_dir=str(model_dir),
        device=args.device,
        dtype=args.dtype,
        ops=resolve_ops(args),
        kernels=str(kernels_dir(args)) if args.kernels else None,
        pdl=False if args.no_pdl else None,
        max_batch=checked.integer(args.max_batch, "--max-batch", lo=1, hi=1024),
        max_len=max_len,
        prefill_budget=checked.integer(args.prefill_budget, "--prefill-budget", lo=1),
        prefill_rows=checked.integer(args.prefill_rows, "--prefill-rows", lo=1, hi=1024),
        use_graph=False if args.no_graph else None,
        seed=checked.seed(args.seed),
    )
    config = ServeConfig(
        engine=settings,
        host=args.host,
        port=checked.integer(args.port, "--port", lo=0, hi=65535),
        api_key=_api_key(args.api_key_env),
        max_queue=checked.integer(args.max_queue, "--max-queue", lo=0),
        shutdown_timeout_s=checked.real(args.shutdown_timeout, "--shutdown-timeout", lo=0.0),
        served_name=args.served_model_name,
        chat_template=Path(template) if template else None,
        access_log=args.access_log,
    )
    return run_server(config)


def _api_key(var: str | None) -> str | None:
    if var is None:
        return None
    key = os.environ.get(var, "")
    if not key:
        raise ConfigError(f"--api-key-env {var}: the variable is not set or empty")
    return key
