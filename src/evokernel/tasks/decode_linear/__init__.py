"""`decode_linear`: the task definition (task.py), its shapes (scenarios.py), its seeded inputs
(inputs.py) and the seed candidate (seed.py, a standalone file the evaluator loads by path;
never imported by the package)."""
