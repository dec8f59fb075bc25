"""`decode_layer`: one Qwen3 decoder layer's decode step as a task. The task definition and its
shape names (task.py), its shapes (scenarios.py), its seeded inputs with junk past each
length (inputs.py) and the seed candidate (seed.py, the engine's fused kernels in one
standalone file the evaluator loads by path; never imported by the package)."""
