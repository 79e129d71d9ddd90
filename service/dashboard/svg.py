"""Plot geometry for the server-rendered SVG: pure functions from numbers to coordinates, no I/O.

Templates only place what these return, so the plots are testable without a browser and need no
front-end build step or charting library.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

# 20 colours of high mutual contrast (Okabe-Ito without black, then Kelly's), none grey or black:
# grey means "failed parity" and the light fill "not measured". A variant's colour is fixed by its
# place in its family's declared space, so it is the same on every page and every plot.
PALETTE = (
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#875692",
    "#8DB600", "#882D17", "#A1CAF1", "#BE0032", "#C2B280", "#604E97", "#F99379", "#008856",
    "#B3446C", "#DCD300", "#654522", "#0067A5",
)  # fmt: skip
FAILED_COLOR = "#9a9a9a"
VOID_COLOR = "#f3f3f3"


@lru_cache(maxsize=1)
def _declared_order() -> dict[str, int]:
    """Each built-in variant name -> its index in its package's space (every backend, declared order)."""
    from kernels.packages.loader import builtin_packages

    order: dict[str, int] = {}
    for package in builtin_packages().values():
        names: list[str] = []
        for backend in ("rocm", "cuda", "host"):
            if package.source_key(backend) is not None:
                names += [v.name for v in package.space(backend) if v.name not in names]
        for index, name in enumerate(names):
            order.setdefault(name, index)
    return order


def variant_color(name: str) -> str:
    """The one colour of a variant everywhere; unknown names get a stable hashed one."""
    index = _declared_order().get(name)
    if index is None:
        index = zlib.crc32(name.encode())
    return PALETTE[index % len(PALETTE)]


def color_map(names: Iterable[str]) -> dict[str, str]:
    """Legend order (sorted) with each variant's fixed colour."""
    return {name: variant_color(name) for name in sorted(set(names))}


def text_color(background: str) -> str:
    """Black or white, whichever reads better on the background (relative luminance)."""
    r, g, b = (int(background[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return "#000" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.5 else "#fff"


def text_width(text: str, px_per_char: float = 6.6) -> float:
    """A generous width estimate of 11px system-ui text, so SVG labels are never clipped."""
    return len(text) * px_per_char


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1-2-5 steps)."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.floor(lo / step) * step
    ticks: list[float] = []
    value = first
    while value <= hi + step * 1e-9:
        if value >= lo - step * 1e-9:
            ticks.append(round(value, 12))
        value += step
    return ticks


@dataclass(frozen=True)
class BoxStats:
    n: int
    q1: float
    median: float
    q3: float
    whisker_lo: float
    whisker_hi: float
    outliers: tuple[float, ...]


def quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on already sorted data."""
    position = (len(ordered) - 1) * q
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def box_stats(values: Iterable[float], max_outliers: int = 60) -> BoxStats | None:
    """Tukey box: quartiles, whiskers at the furthest points within 1.5 IQR, the rest as outliers."""
    ordered = sorted(values)
    if not ordered:
        return None
    q1, median, q3 = (quantile(ordered, q) for q in (0.25, 0.5, 0.75))
    fence_lo, fence_hi = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    inside = [v for v in ordered if fence_lo <= v <= fence_hi]
    outliers = [v for v in ordered if v < fence_lo or v > fence_hi]
    if len(outliers) > max_outliers:  # keep the extremes, which are what a reader looks for
        half = max_outliers // 2
        outliers = outliers[:half] + outliers[-half:]
    return BoxStats(len(ordered), q1, median, q3, inside[0], inside[-1], tuple(outliers))


@dataclass
class Axis:
    lo: float
    hi: float
    x0: float
    x1: float
    ticks: list[float] = field(default_factory=list)

    def at(self, value: float) -> float:
        span = self.hi - self.lo or 1.0
        return self.x0 + (value - self.lo) / span * (self.x1 - self.x0)


def value_axis(values: Iterable[float], x0: float, x1: float) -> Axis:
    data = [v for v in values if math.isfinite(v)]
    if not data:
        return Axis(0.0, 1.0, x0, x1, [0.0, 1.0])
    lo, hi = min(data), max(data)
    pad = (hi - lo) * 0.05 or max(abs(hi) * 0.05, 1e-3)
    ticks = nice_ticks(max(lo - pad, 0.0), hi + pad)
    return Axis(min(ticks[0], lo), max(ticks[-1], hi), x0, x1, ticks)


def fmt_pct(value: float | None, digits: int = 1) -> str:
    """A fraction as a percentage, rounded for reading (0.9393939 -> '93.9%')."""
    return "-" if value is None else f"{100 * value:.{digits}f}%"


def fmt_us(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"
