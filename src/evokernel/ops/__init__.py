"""Op name -> implementation: torch references (reference.py), Triton launchers (norm.py,
activation.py, rope.py, embedding.py, decode.py), the CUDA C++ attention's launcher
(attention_cuda.py, built by cuda_build.py), candidate files (candidates.py), and the OpSet
(registry.py).

Launchers import their kernels lazily, after `evokernel.device.prepare()`.
"""
