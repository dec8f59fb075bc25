"""`gqa_decode_attention`: the task definition (task.py), its shapes (scenarios.py), its seeded
inputs with junk past each length (inputs.py) and the seed candidate (seed.py, a standalone
file the evaluator loads by path; never imported by the package)."""
