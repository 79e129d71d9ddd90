"""Seeded, vectorised bootstrap of medians (DESIGN §5.5).

Each sample gets its own generator, seeded from a stable string (the point and the
variant), so the same data always gives the same interval on every machine and in
every process (no dependence on PYTHONHASHSEED or call order). The bootstrap
medians of two independent samples are independent replicates, so the interval of
a ratio of medians is the percentile interval of the elementwise ratio of the two
replicate vectors: each sample is resampled once, whatever it is compared with.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_RESAMPLES = 2000
DEFAULT_CONFIDENCE = 0.95
_CHUNK_ELEMENTS = 1 << 22  # bound memory: at most ~32 MiB of float64 indices+values per chunk


def stable_seed(*parts: object) -> int:
    """A 63-bit seed from the parts' text; identical across processes and platforms."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def bootstrap_medians(
    values: Sequence[float] | np.ndarray, seed: int, resamples: int = DEFAULT_RESAMPLES
) -> np.ndarray:
    """``resamples`` medians of with-replacement resamples of ``values`` (same seed, same result)."""
    data = np.asarray(values, dtype=np.float64)
    if data.ndim != 1 or data.size == 0:
        raise ValueError("bootstrap needs a non-empty 1-D sample")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    rng = np.random.default_rng(seed)
    n = data.size
    out = np.empty(resamples, dtype=np.float64)
    rows = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = np.median(data[idx], axis=1)
    return out


def percentile_interval(
    replicates: np.ndarray, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float]:
    """Two-sided percentile interval of bootstrap replicates."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(replicates, [tail, 100.0 - tail])
    return float(lo), float(hi)


@dataclass(frozen=True)
class MedianEstimate:
    """A sample's median with its bootstrap interval; ``replicates`` feed ratio intervals."""

    n: int
    median: float
    ci: tuple[float, float]
    replicates: np.ndarray


def estimate_median(
    values: Sequence[float] | np.ndarray,
    seed: int,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> MedianEstimate:
    data = np.asarray(values, dtype=np.float64)
    replicates = bootstrap_medians(data, seed, resamples)
    return MedianEstimate(
        n=int(data.size),
        median=float(np.median(data)),
        ci=percentile_interval(replicates, confidence),
        replicates=replicates,
    )


def ratio_interval(
    numerator: MedianEstimate, denominator: MedianEstimate, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, tuple[float, float]]:
    """Ratio of medians numerator/denominator and its percentile interval.

    Both estimates must come from the same number of resamples.
    """
    if numerator.replicates.size != denominator.replicates.size:
        raise ValueError("estimates were bootstrapped with different resample counts")
    if denominator.median <= 0 or np.any(denominator.replicates <= 0):
        raise ValueError("ratio of medians needs positive times")
    ratio = numerator.median / denominator.median
    return ratio, percentile_interval(numerator.replicates / denominator.replicates, confidence)


def log_ratio_interval(
    numerator: MedianEstimate, denominator: MedianEstimate, z: float
) -> tuple[float, tuple[float, float]]:
    """Ratio of medians with a normal interval on its log, the standard error taken from the replicates.

    Used where the confidence is too high for percentile tails to be estimated from a few
    hundred replicates (e.g. 99.5% per look after a correction for repeated looks): the
    standard deviation of the log-ratio replicates is stable with far fewer resamples than
    its 0.25% quantiles are. Both estimates must come from the same number of resamples.
    """
    if numerator.replicates.size != denominator.replicates.size:
        raise ValueError("estimates were bootstrapped with different resample counts")
    if z <= 0:
        raise ValueError(f"z must be > 0, got {z}")
    if denominator.median <= 0 or numerator.median <= 0:
        raise ValueError("ratio of medians needs positive times")
    if np.any(denominator.replicates <= 0) or np.any(numerator.replicates <= 0):
        raise ValueError("ratio of medians needs positive times")
    centre = float(np.log(numerator.median) - np.log(denominator.median))
    se = float(np.std(np.log(numerator.replicates) - np.log(denominator.replicates), ddof=1))
    return float(np.exp(centre)), (float(np.exp(centre - z * se)), float(np.exp(centre + z * se)))
