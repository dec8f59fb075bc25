"""Op name -> implementation: torch references (reference.py), Triton launchers (norm.py,
activation.py, rope.py), candidate files (candidates.py), and the OpSet (registry.py).

Launchers import their kernels lazily, after `evokernel.device.prepare()`.
"""
