"""`evokernel serve`: an OpenAI-compatible HTTP server over the engine (docs/serve.md).

Two processes. The HTTP process (Starlette + uvicorn, the `serve` extra) validates requests,
renders chat templates, tokenizes and detokenizes, applies stop strings and writes JSON and
server-sent events; the engine process (serve/scheduler.py, no HTTP code) owns the model and
the KV cache and runs continuous batching (engine/batching.py). They exchange token ids over
one pipe.

  cli/serve.py -> server.py (start, bind, signals) -> app.py (routes)
    app.py: protocol.py (request bodies) -> jobs.py (prompt ids, limits) -> engine_client.py
            -> generation.py (tokens -> text: text.py) -> formats.py (OpenAI JSON, SSE)
    engine process: scheduler.py -> engine/batching.py -> the model
"""
