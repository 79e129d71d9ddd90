"""CUDA events around each launch: the second GPU clock, kept beside CUPTI's (DESIGN §5.1).

Event pairs measure from the stream's point of view (they include the launch's
front-end latency on the GPU), so they read slightly above CUPTI's kernel
duration; storing both keeps that gap visible.
"""

from __future__ import annotations

from typing import Any

from workers.harness import cuda_driver as cd


class EventTimer:
    """One reusable start/stop event pair on one stream."""

    def __init__(self, stream: Any = 0) -> None:
        cd.require()
        flags = cd.driver.CUevent_flags.CU_EVENT_DEFAULT
        self._start = cd.check(cd.driver.cuEventCreate(flags), "cuEventCreate")
        self._stop = cd.check(cd.driver.cuEventCreate(flags), "cuEventCreate")
        self._stream = stream

    def start(self) -> None:
        cd.check(cd.driver.cuEventRecord(self._start, self._stream), "cuEventRecord")

    def stop_ns(self) -> int:
        """Record the stop event, wait for it, and return the elapsed time in ns (0.5 us resolution)."""
        cd.check(cd.driver.cuEventRecord(self._stop, self._stream), "cuEventRecord")
        cd.check(cd.driver.cuEventSynchronize(self._stop), "cuEventSynchronize")
        ms = cd.check(cd.driver.cuEventElapsedTime(self._start, self._stop), "cuEventElapsedTime")
        return round(float(ms) * 1e6)

    def close(self) -> None:
        for event in (self._start, self._stop):
            cd.driver.cuEventDestroy(event)
