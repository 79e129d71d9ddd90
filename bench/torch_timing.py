"""GPU time of torch calls, measured the way the runner measures ours: CUPTI kernel durations per dispatch.

CUDA events around one host call also count the GPU waiting while the host enqueues the call (torch's
dispatch, cuBLAS's heuristics): on the H200 that added ~25 µs to every cuBLAS fp16 matmul (2026-12-01,
device call e2: GateUp M = 128 49.0 µs by CUPTI, 75.5 by events), which made small-M comparisons look better
for us than they were. torch.profiler records CUPTI kernel activity, comparable to the runner's durations.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any


def cupti_per_dispatch(call: Callable[[int], object], dispatches: int) -> dict[str, Any]:
    """Each dispatch's kernel time: the sum of its kernels' CUPTI durations (a fixed count per call)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(dispatches):
            call(i)
        torch.cuda.synchronize()
    kernels = sorted(
        (e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start
    )
    if not kernels or len(kernels) % dispatches:
        raise RuntimeError(f"{len(kernels)} kernel records for {dispatches} dispatches")
    per = len(kernels) // dispatches
    times = [
        sum(e.time_range.elapsed_us() for e in kernels[i * per : (i + 1) * per]) for i in range(dispatches)
    ]
    return {
        "cupti_us": statistics.median(times),
        "cupti_min_us": min(times),
        "kernels_per_dispatch": per,
        "kernel_names": sorted({e.name for e in kernels})[:4],
    }


def events_per_call(call: Callable[[int], object], dispatches: int) -> list[float]:
    """CUDA-event time (µs) around each call: includes the host's enqueue time (kept for comparison only)."""
    import torch

    times = []
    for i in range(dispatches):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call(i)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return times


def events_back_to_back(call: Callable[[int], object], dispatches: int) -> float:
    """CUDA-event time (µs) per call around ``dispatches`` calls queued back to back (for comparison)."""
    import torch

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(dispatches):
        call(i)
    stop.record()
    stop.synchronize()
    return float(start.elapsed_time(stop) * 1e3 / dispatches)
