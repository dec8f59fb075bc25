"""CUDA C++ kernels, built at run time (ops/cuda_build.py) where Triton cannot reach the goal.

Each `<name>.cu` here is one shared library exporting `extern "C"` launchers; its header
comment is its contract. Every kernel has a Triton counterpart the engine falls back to where
the library cannot be built (no nvcc, no GPU, the CPU interpreter).
"""
