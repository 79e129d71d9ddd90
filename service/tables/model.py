"""Plain data passed between the table generator's steps.

Kept free of behaviour (beyond small invariants) so fitting, rendering and
validation stay pure functions over these values and are easy to test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Codebook ids follow the Llaminar NativeVNNI numbering (DESIGN §3) so tables are
# drop-in; the names are only used in comments, so an id missing here is still
# valid if the caller declares it known (new codebooks take ids >= 32).
CODEBOOK_FORMATS: Mapping[int, tuple[str, ...]] = {
    0: ("Q4_0",),
    4: ("IQ4_NL", "IQ4_XS"),
    5: ("Q4_1", "Q4_K"),
    6: ("Q5_0",),
    7: ("Q5_1", "Q5_K"),
    8: ("Q6_K",),
    9: ("Q3_K",),
    10: ("Q2_K",),
    11: ("IQ3_S",),
    12: ("IQ3_XXS",),
    13: ("IQ2_S",),
    14: ("IQ2_XS",),
    15: ("IQ2_XXS",),
    16: ("IQ1_S",),
    17: ("IQ1_M",),
    19: ("Q8_0",),
    32: ("MXFP4",),
    33: ("NVFP4",),
}

KNOWN_CODEBOOKS: frozenset[int] = frozenset(CODEBOOK_FORMATS)

# (codebook, m, n, k): the runtime dispatch surface of a table (M is the table's M key).
PointKey = tuple[int, int, int, int]


class AtPoint:
    """Mixin for records at one (codebook, M, N, K): `.point` is that key."""

    __slots__ = ()
    codebook: int
    m: int
    n: int
    k: int

    @property
    def point(self) -> PointKey:
        return (self.codebook, self.m, self.n, self.k)


@dataclass(frozen=True)
class TableChoice(AtPoint):
    """The chosen variant for one (codebook, M, N, K) after alias collapse."""

    codebook: int
    formats: tuple[str, ...]
    m: int
    n: int
    k: int
    shape: str
    variant: str
    median_us: float


@dataclass(frozen=True)
class PointTimes(AtPoint):
    """Every parity-passing variant's median at one point; needed for regret."""

    codebook: int
    m: int
    n: int
    k: int
    shape: str
    times_us: Mapping[str, float]
    ties: frozenset[str] = frozenset()  # statistically tied with the best: no regret when fitting


@dataclass(frozen=True)
class MeasuredPoint(AtPoint):
    """One point the table is judged on: its winner and (optionally) all times."""

    codebook: int
    m: int
    n: int
    k: int
    shape: str
    winner: str
    times_us: Mapping[str, float] | None = None
    ties: frozenset[str] = frozenset()  # fitting counts these as regret 0 (noise-level gaps)

    @property
    def work_items(self) -> int:
        return self.n * self.k


@dataclass(frozen=True)
class FallbackRule:
    """One work-size segment of the fallback for (codebook, M, aspect class)."""

    codebook: int
    m: int
    aspect: str
    max_work_items: int
    variant: str
    points: int = 0
    worst_regret: float | None = None
    mean_regret: float | None = None


@dataclass(frozen=True)
class TableMetrics:
    """How well the table answers the measured points (regret needs all times)."""

    coverage: float  # share of measured points the table answers at all
    exact_hit_rate: float  # share whose answer is exactly the declared winner
    mean_regret: float | None
    p95_regret: float | None
    entries: int
    fallback_rules: int
    points: int = 0
    regret_points: int = 0
    exact_entry_rate: float = 0.0  # share answered by an exact (overlay) entry
    max_regret: float | None = None
    overlay_threshold: float | None = None
    segments_cv_regret: float | None = None  # mean held-out regret of the fallback (grouped CV)


@dataclass(frozen=True)
class HeaderInfo:
    """Provenance and metrics recorded in the generated header's comment."""

    generator: str
    version: str
    dialect: str
    arch: str
    phase: str
    sweep_ids: tuple[str, ...]
    metrics: TableMetrics
    fallback_policies: tuple[str, ...] = ()  # per codebook: segments or tree, and the held-out figures


@dataclass(frozen=True)
class GeneratedTable:
    """A rendered, validated table plus the figures stored with its version."""

    dialect: str
    arch: str
    phase: str
    text: str
    metrics: TableMetrics
    sweep_ids: tuple[str, ...]
    checks: tuple[str, ...] = field(default=())
    entries: tuple[TableChoice, ...] = field(default=())  # the exact overlays emitted
    decisions: tuple[PointDecision, ...] = field(default=())  # what the table answers per point
    fallback_policies: dict[int, str] = field(default_factory=dict)  # codebook -> segments | tree


@dataclass(frozen=True)
class PointDecision:
    """The table's answer at one measured point; stored with a version so diffs show regret."""

    codebook: int
    formats: tuple[str, ...]
    m: int
    n: int
    k: int
    shape: str
    winner: str
    variant: str | None
    source: str  # exact | fallback | none
    regret: float | None
    fallback_regret: float | None
