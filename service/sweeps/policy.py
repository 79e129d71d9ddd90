"""The M policy (DESIGN §3): which batch sizes a phase is tuned for, and how run-time M rounds up."""

from __future__ import annotations

import bisect

DECODE_M: tuple[int, ...] = (1, 2, 3, 4)
PREFILL_M_BUCKETS: tuple[int, ...] = (
    2,
    3,
    4,
    64,
    128,
    256,
    384,
    512,
    544,
    576,
    600,
    608,
    640,
    672,
    704,
    736,
    768,
    1024,
    1280,
    1536,
    2048,
    2560,
    3072,
    4096,
)
PHASE_M: dict[str, tuple[int, ...]] = {"decode": DECODE_M, "prefill": PREFILL_M_BUCKETS}


def m_bucket(phase: str, m: int) -> int:
    """The bucket a run-time M rounds up to (the largest bucket when M exceeds them all)."""
    buckets = PHASE_M[phase]
    index = bisect.bisect_left(buckets, m)
    return buckets[min(index, len(buckets) - 1)]
