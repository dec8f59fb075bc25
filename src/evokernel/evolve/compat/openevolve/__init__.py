"""A stand-in for the `openevolve` package, only for evaluators run by `evokernel evolve`.

OpenEvolve evaluators import `from openevolve.evaluation_result import EvaluationResult`.
When the real package is not installed, the sandboxed stage runner (`evolve/stages.py`) puts
this directory at the end of the evaluator's `sys.path`, so such evaluators run unchanged; an
installed `openevolve` always wins. Nothing else of OpenEvolve is provided.
"""
