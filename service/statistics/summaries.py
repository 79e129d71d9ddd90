"""Comparisons of imported summaries (min, mean, stddev, n) without per-dispatch times.

A trainer CSV (Llaminar's) ranks variants by ``min_us``, the fastest of ``n`` timed runs, and
reports ``mean_us`` and the population ``stddev_us`` of those runs beside it. We rank the same
way and judge a gap the way the bootstrap judges sweep data (DESIGN §5.5), with an interval:

* The noise of a minimum of ``n`` runs is modelled as that of the minimum of ``n`` normal draws
  with the runs' stddev: ``se(min) = stddev * c(n)``, where ``c(n)`` is the standard deviation of
  the smallest of ``n`` standard normal draws (0.525 at n = 20). GPU timings are close to
  normal or skewed to the slow side; a right-skewed spread makes the minimum steadier than
  that, so the model errs towards calling a gap noise.
* The ratio ``min_c / min_leader`` gets a normal interval from both standard errors (first-order
  propagation): ``ratio -+ z * sqrt(se_c**2 + (ratio * se_l)**2) / min_l``.

The caller applies the same rule as for bootstrap intervals: a candidate is shown slower when the
interval's lower end exceeds ``1 + min_effect``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

from service.statistics.bootstrap import DEFAULT_CONFIDENCE

# Llaminar's trainers (Perf__NativeVNNI_Throughput.cpp decode, Perf__NativeVNNI_Sweep.cpp prefill):
# 5 warm-up runs, then BENCH_RUNS = 20 timed runs per variant, min/mean/population stddev over them.
LLAMINAR_TRAINER_RUNS = 20


@dataclass(frozen=True)
class SummaryStats:
    """What a trainer reports of one variant's runs."""

    min_us: float
    mean_us: float
    stddev_us: float
    n: int

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"a summary needs n >= 1 runs, got {self.n}")
        if not (self.min_us > 0 and math.isfinite(self.min_us)):
            raise ValueError(f"min_us must be positive, got {self.min_us}")
        if self.stddev_us < 0 or not math.isfinite(self.stddev_us):
            raise ValueError(f"stddev_us must be finite and >= 0, got {self.stddev_us}")

    @property
    def se_min(self) -> float:
        """Standard error of the minimum (see the module docstring)."""
        return self.stddev_us * min_spread(self.n)


@lru_cache(maxsize=256)
def min_spread(n: int) -> float:
    """Standard deviation of the minimum of ``n`` independent standard normal draws.

    Numerical integration of the order-statistic density n * phi(x) * (1 - Phi(x))**(n - 1);
    exact to ~1e-6, which is far below what the rule needs.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return 1.0
    unit = NormalDist()
    step = 0.001
    lo, hi = -9.0, 6.0
    mass = first = second = 0.0
    x = lo
    while x <= hi:
        density = n * unit.pdf(x) * (1.0 - unit.cdf(x)) ** (n - 1)
        mass += density * step
        first += x * density * step
        second += x * x * density * step
        x += step
    mean = first / mass
    return math.sqrt(max(0.0, second / mass - mean * mean))


def ratio_interval(
    candidate: SummaryStats, leader: SummaryStats, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, tuple[float, float]]:
    """``min_c / min_l`` and its two-sided normal interval at ``confidence``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    ratio = candidate.min_us / leader.min_us
    se = math.hypot(candidate.se_min, ratio * leader.se_min) / leader.min_us
    return ratio, (ratio - z * se, ratio + z * se)


def beyond_noise(
    candidate: SummaryStats, leader: SummaryStats, min_effect: float, confidence: float = DEFAULT_CONFIDENCE
) -> bool:
    """True when ``candidate`` is shown slower than ``leader`` by more than ``min_effect``."""
    return ratio_interval(candidate, leader, confidence)[1][0] > 1.0 + min_effect
