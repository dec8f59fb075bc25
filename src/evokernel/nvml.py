"""NVML, the driver's management library, through ctypes: driver version, clocks, board power.

    gpu = Nvml.open(torch_device_index)      # None when NVML is unavailable (no driver, no GPU)
    gpu.driver(), gpu.clocks_mhz(), gpu.energy_mj(), gpu.power_w()

`libnvidia-ml.so.1` ships with every NVIDIA driver, so this needs no Python package (the
`pynvml` module is the same calls through ctypes, and is often not installed where torch is).
Every query returns None when the GPU or driver does not support it; nothing here raises after
`open` succeeded. NVML numbers GPUs in its own order: the torch device is mapped through
`CUDA_VISIBLE_DEVICES` by torch's own helper.
"""

from __future__ import annotations

import ctypes
from typing import Any

_CLOCK_SM, _CLOCK_MEM = 1, 2  # nvmlClockType_t: GRAPHICS 0, SM 1, MEM 2
_SUCCESS = 0


class Nvml:
    """One GPU's NVML handle; see the module doc."""

    def __init__(self, lib: Any, handle: ctypes.c_void_p) -> None:
        self._lib = lib
        self._handle = handle

    @classmethod
    def open(cls, device_index: int = 0) -> Nvml | None:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != _SUCCESS:
                return None
        except (OSError, AttributeError):
            return None
        handle = ctypes.c_void_p()
        index = _nvml_index(device_index)
        if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)):
            return None
        return cls(lib, handle)

    def driver(self) -> str | None:
        buf = ctypes.create_string_buffer(96)
        if self._lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(len(buf))) != _SUCCESS:
            return None
        return buf.value.decode(errors="replace")

    def clocks_mhz(self) -> dict[str, int] | None:
        """Current SM and memory clocks, or None when unreadable."""
        out = {}
        for name, kind in (("sm", _CLOCK_SM), ("mem", _CLOCK_MEM)):
            value = ctypes.c_uint()
            if self._lib.nvmlDeviceGetClockInfo(self._handle, kind, ctypes.byref(value)):
                return None
            out[name] = int(value.value)
        return out

    def energy_mj(self) -> int | None:
        """Board energy in millijoules since the driver loaded (Volta and newer)."""
        value = ctypes.c_ulonglong()
        if self._lib.nvmlDeviceGetTotalEnergyConsumption(self._handle, ctypes.byref(value)):
            return None
        return int(value.value)

    def power_w(self) -> float | None:
        """Board power draw now (averaged by the driver over its own sample period)."""
        value = ctypes.c_uint()
        if self._lib.nvmlDeviceGetPowerUsage(self._handle, ctypes.byref(value)):
            return None
        return value.value / 1e3


def _nvml_index(device_index: int) -> int:
    try:
        import torch

        return int(torch.cuda._get_nvml_device_index(device_index))
    except Exception:  # private helper; without it, assume NVML's order is torch's
        return device_index
