"""`@triton.jit` bodies only, one file per op family; launchers live in evokernel.ops.

Import only after `evokernel.device.prepare()` has set the Triton mode.
"""
