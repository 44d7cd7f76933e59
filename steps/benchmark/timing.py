"""Latency of one callable at one batch size: warm-up, then timed iterations.

On a GPU each iteration is bracketed by CUDA events and synchronised, so a latency is the
device time of one call from an idle queue; on a CPU it is ``perf_counter`` around the
call. Iterations run until the time budget is spent or ``max_iters`` is reached, and never
fewer than ``min_iters``. The benchmark spreads each variant's iterations over interleaved
rounds (``benchmark.rounds``), so that load from other processes on a shared machine falls
on all variants alike rather than on whichever ran during a busy spell.

Peak memory: on a GPU, ``torch.cuda.max_memory_allocated`` above what was allocated before
(reset per measurement). On a CPU, the process's peak resident set (``VmHWM``) above its
resident set before the measurement, with the peak reset through ``/proc/self/clear_refs``
(Linux); where that reset is not allowed, the rise of ``ru_maxrss``, which reads 0 when the
measurement stays below an earlier peak. ``memory_method`` says which one a number is.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

import numpy as np
import torch

from steps.common.trained_model import Runner

MB = 1024 * 1024


class _CpuMemory:
    method = "rss_hwm"

    def __init__(self) -> None:
        self.can_reset = _reset_hwm()
        if not self.can_reset:
            self.method = "ru_maxrss_delta"

    def start(self) -> None:
        _reset_hwm()
        self.before = _status_kb("VmRSS") if self.can_reset else _ru_maxrss_kb()

    def peak_mb(self) -> float:
        peak = _status_kb("VmHWM") if self.can_reset else _ru_maxrss_kb()
        return max(peak - self.before, 0) / 1024


class _CudaMemory:
    method = "cuda_max_allocated"

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def start(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.before = torch.cuda.memory_allocated(self.device)

    def peak_mb(self) -> float:
        return (torch.cuda.max_memory_allocated(self.device) - self.before) / MB


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}")


def _reset_hwm() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        _status_kb("VmHWM")
        return True
    except OSError:
        return False


def _ru_maxrss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def memory_probe(device: torch.device):
    return _CudaMemory(device) if device.type == "cuda" else _CpuMemory()


def time_calls(
    fn: Runner,
    x: torch.Tensor,
    warmup: int,
    min_iters: int,
    max_iters: int,
    budget_s: float,
    warmup_s: float = 0.0,
) -> list[float]:
    """Milliseconds of each timed call of ``fn(x)``, after at least ``warmup`` untimed calls
    lasting at least ``warmup_s`` (the first hundreds of small calls on a CPU are slower:
    the allocator's mmap threshold, oneDNN primitive caches, TorchScript's profiling runs)."""
    cuda = x.is_cuda
    times: list[float] = []
    with torch.inference_mode():
        warm_until = time.perf_counter() + warmup_s
        done = 0
        while done < warmup or time.perf_counter() < warm_until:
            fn(x)
            done += 1
        if cuda:
            torch.cuda.synchronize(x.device)
        deadline = time.perf_counter() + budget_s
        while len(times) < max_iters:
            if cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn(x)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn(x)
                times.append((time.perf_counter() - t0) * 1000)
            if len(times) >= min_iters and time.perf_counter() >= deadline:
                break
    return times


def summarize(times: list[float], batch: int, peak_mem_mb: float) -> dict[str, float]:
    """Latency percentiles (ms), images/s and peak memory of one variant at one batch size.

    images/s is ``batch / p50``: the throughput of one stream of back-to-back calls, as
    robust to a busy machine's outliers as the median itself (``mean_ms`` is kept too).
    """
    ms = np.asarray(times)
    p50 = float(np.percentile(ms, 50))
    return {
        "iters": len(times),
        "p50_ms": p50,
        "p90_ms": float(np.percentile(ms, 90)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
        "min_ms": float(ms.min()),
        "max_ms": float(ms.max()),
        "images_per_s": batch * 1000.0 / p50,
        "peak_mem_mb": peak_mem_mb,
    }
