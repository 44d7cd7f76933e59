"""The hardware a step runs on: the device it picks, the CPU's capabilities, and the
versions recorded with every result (optimize, benchmark)."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import torch


def pick_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def cpu_capability() -> str:
    return torch.backends.cpu.get_cpu_capability()


def cpu_bf16_features() -> list[str]:
    """This CPU's native BF16 units: AMX tiles and/or AVX512-BF16 (none: emulated, slow)."""
    probes = {"amx": "_is_amx_tile_supported", "avx512_bf16": "_is_avx512_bf16_supported"}
    return [name for name, probe in probes.items() if getattr(torch.cpu, probe, lambda: False)()]


def environment(device: torch.device) -> dict[str, Any]:
    """Versions and hardware, recorded with every result."""
    try:
        import torch_tensorrt

        trt_version = torch_tensorrt.__version__
    except ImportError:
        trt_version = None
    env = {
        "torch": torch.__version__,
        "torch_tensorrt": trt_version,
        "python": platform.python_version(),
        "device": device.type,
        "cpu": _cpu_name(),
        "cpu_capability": cpu_capability(),
        "cpu_bf16_features": cpu_bf16_features(),
        "threads": torch.get_num_threads(),
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }
    return env


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    """How reports name the hardware: the GPU's name, else the CPU's and its thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{_cpu_name()} ({torch.get_num_threads()} threads)"
