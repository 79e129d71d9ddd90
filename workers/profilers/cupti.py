"""Per-dispatch kernel durations from CUPTI activity records (the ``cupti-python`` package).

CUPTI's CONCURRENT_KERNEL records carry the GPU's own start/end timestamps of
every kernel, with no host in between: that is the device time DESIGN §5.1 asks
for. Records arrive asynchronously in buffers; ``KernelTrace`` collects them
between ``start()`` and ``stop()`` and returns them in launch order (by
correlation id), so the caller can pair them 1:1 with the launches it made.
The package is optional: ``available()`` is False without it, and callers fall
back to CUDA events and say so.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

cupti: Any = None
IMPORT_ERROR = ""
try:  # pragma: no cover - depends on the machine
    from cupti import cupti as _cupti

    cupti = _cupti
except Exception as _exc:  # ImportError, or a missing libcupti behind it  # pragma: no cover
    IMPORT_ERROR = f"cupti-python unavailable: {type(_exc).__name__}: {_exc}"

BUFFER_BYTES = 8 << 20


@dataclass(frozen=True)
class KernelRecord:
    name: str
    start_ns: int
    end_ns: int
    correlation_id: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def available() -> bool:
    """cupti-python importable and not switched off (TUNEBASE_CUPTI=0, e.g. under ncu, which owns CUPTI)."""
    import os

    return cupti is not None and os.environ.get("TUNEBASE_CUPTI", "1") != "0"


def version() -> str:
    try:
        from importlib.metadata import version as _version

        return f"cupti-python {_version('cupti-python')}"
    except Exception:
        return ""


class KernelTrace:
    """Collect kernel activity records between start() and stop(); one trace at a time per process."""

    _lock = threading.Lock()
    _registered = False
    _sink: list[KernelRecord] | None = None

    def __init__(self) -> None:
        if cupti is None:
            raise RuntimeError(IMPORT_ERROR or "cupti-python is not installed")
        self.records: list[KernelRecord] = []
        self.dropped = 0

    @classmethod
    def _register(cls) -> None:
        if cls._registered:
            return

        def requested() -> tuple[int, int]:
            return BUFFER_BYTES, 0

        def completed(activities: list[Any]) -> None:
            sink = cls._sink
            if sink is None:
                return
            for act in activities:
                if act.kind in (cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.KERNEL):
                    sink.append(
                        KernelRecord(str(act.name), int(act.start), int(act.end), int(act.correlation_id))
                    )

        cupti.activity_register_callbacks(requested, completed)
        cls._registered = True

    def start(self) -> None:
        KernelTrace._lock.acquire()
        try:
            self._register()
            cupti.activity_flush_all(1)  # drop anything recorded before this trace
            KernelTrace._sink = self.records
            self.records.clear()
            cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
        except Exception:
            KernelTrace._lock.release()
            raise

    def stop(self) -> list[KernelRecord]:
        """Flush, disable, and return this trace's kernel records in launch order."""
        try:
            cupti.activity_flush_all(1)
            cupti.activity_disable(cupti.ActivityKind.CONCURRENT_KERNEL)
            cupti.activity_flush_all(1)
        finally:
            KernelTrace._sink = None
            KernelTrace._lock.release()
        # a graph's kernels share its launch's correlation id: its kernels in the order they started
        self.records.sort(key=lambda r: (r.correlation_id, r.start_ns))
        return list(self.records)
