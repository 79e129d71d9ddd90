"""Synthetic timing data of known truth: lognormal noise around a true median."""

from __future__ import annotations

import math

import numpy as np


def lognormal_times(rng: np.random.Generator, median_us: float, cv: float, n: int) -> tuple[float, ...]:
    """``n`` times whose true median is ``median_us`` and whose coefficient of variation is ``cv``."""
    sigma = math.sqrt(math.log1p(cv * cv))
    return tuple(float(v) for v in median_us * np.exp(sigma * rng.standard_normal(n)))
