"""Per-measurement summary statistics (DESIGN §5.5) from per-dispatch device times."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class TimingSummary:
    n: int
    median_us: float
    min_us: float
    p10_us: float
    p90_us: float
    mean_us: float
    stddev_us: float
    cv: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def summarize_ns(times_ns: Sequence[int] | np.ndarray) -> TimingSummary | None:
    """Summarise dispatch times given in ns; None when there is nothing to summarise."""
    values = np.asarray(times_ns, dtype=np.float64) / 1000.0
    if values.size == 0:
        return None
    mean = float(values.mean())
    stddev = float(values.std(ddof=1)) if values.size > 1 else 0.0
    p10, median, p90 = (float(v) for v in np.percentile(values, [10, 50, 90]))
    return TimingSummary(
        n=int(values.size),
        median_us=median,
        min_us=float(values.min()),
        p10_us=p10,
        p90_us=p90,
        mean_us=mean,
        stddev_us=stddev,
        cv=stddev / mean if mean > 0 else 0.0,
    )
