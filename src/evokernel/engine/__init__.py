"""The Qwen3 decode engine: static KV cache, the step as named ops, CUDA-graph runner,
sampling, generate, and verification against transformers (docs/engine.md).

Nothing is imported here: `evokernel.device.prepare()` must run before any Triton import.
"""
