"""What the dashboard shows, read straight from the database (the server's own session, read-only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.dashboard.svg import BoxStats, box_stats
from service.db.models import Artifact, Measurement, Sweep, TableVersion, Task, Variant, Winner
from service.db.queries import at_point
from service.sweeps.availability import Presence
from service.sweeps.service import sweep_status_body
from service.winners import dispatch_times_us
from workers.isa.summary import hot_loop_lines, liveness_lines

MAX_SWEEPS = 20
MAX_TABLES = 20


def recent_sweeps(
    session: Session, presence: Presence | None = None, limit: int = MAX_SWEEPS
) -> list[dict[str, Any]]:
    sweeps = session.scalars(select(Sweep).order_by(Sweep.id.desc()).limit(limit)).all()
    return [sweep_status_body(session, s, presence) for s in sweeps]


@dataclass(frozen=True)
class HeatmapGroup:
    arch: str
    phase: str
    format: str
    winners: int
    kernel: str = ""  # package name: winners of different packages never share a heatmap


def heatmap_groups(session: Session) -> list[HeatmapGroup]:
    rows = session.execute(
        select(Winner.arch, Winner.phase, Winner.format, func.count(), Winner.kernel)
        .group_by(Winner.arch, Winner.phase, Winner.kernel, Winner.format)
        .order_by(Winner.arch, Winner.phase, Winner.kernel, Winner.format)
    ).all()
    return [HeatmapGroup(a, p, f, int(c), kn) for a, p, f, c, kn in rows]


@dataclass
class Heatmap:
    """Rows are shapes (N x K), columns are M; a cell is the winner there, or None when unmeasured."""

    arch: str
    phase: str
    format: str
    shapes: list[tuple[str, int, int]]
    ms: list[int]
    cells: dict[tuple[int, int, int], Winner] = field(default_factory=dict)
    kernel: str | None = None

    @property
    def variants(self) -> list[str]:
        return sorted({w.variant for w in self.cells.values()})


def heatmap(session: Session, arch: str, phase: str, format_name: str, kernel: str | None = None) -> Heatmap:
    query = select(Winner).where(Winner.arch == arch, Winner.phase == phase, Winner.format == format_name)
    winners = session.scalars(query if kernel is None else query.where(Winner.kernel == kernel)).all()
    shapes: dict[tuple[int, int], str] = {}
    for w in winners:
        shapes.setdefault((w.n, w.k), w.shape)
    ordered = sorted(((name, n, k) for (n, k), name in shapes.items()), key=lambda s: (s[1] * s[2], s[1]))
    result = Heatmap(arch, phase, format_name, ordered, sorted({w.m for w in winners}), kernel=kernel)
    result.cells = {(w.n, w.k, w.m): w for w in winners}
    return result


@dataclass(frozen=True)
class Series:
    """One variant's timing distribution at a point: the dispatch rows of its newest measurement."""

    variant: str
    measurement_id: int
    parity_pass: bool
    median_us: float | None
    stats: BoxStats | None
    is_winner: bool


@dataclass
class PointDistributions:
    arch: str
    phase: str
    format: str
    m: int
    n: int
    k: int
    shape: str
    winner: Winner | None
    series: list[Series]
    kernel: str | None = None


def point_distributions(
    session: Session,
    arch: str,
    phase: str,
    format_name: str,
    m: int,
    n: int,
    k: int,
    kernel: str | None = None,
) -> PointDistributions:
    """Newest measurement per variant at the point, with its per-dispatch device times in µs."""
    rows = session.execute(
        select(Measurement, Variant.name)
        .join(Variant, Measurement.variant_id == Variant.id)
        .where(
            *at_point(arch, phase, format_name, m, n, k, kernel),
        )
        .order_by(Measurement.id)
    ).all()
    newest: dict[str, Measurement] = {}
    for measurement, variant in rows:
        newest[variant] = measurement
    times = dispatch_times_us(session, [measurement.id for measurement in newest.values()])
    winner_point = at_point(arch, phase, format_name, m, n, k, kernel, model=Winner)
    winner = session.scalar(select(Winner).where(*winner_point))
    series = [
        Series(
            variant=variant,
            measurement_id=measurement.id,
            parity_pass=measurement.parity_pass,
            median_us=measurement.median_us,
            stats=box_stats(times.get(measurement.id, ())),
            is_winner=winner is not None and winner.variant == variant,
        )
        for variant, measurement in newest.items()
    ]
    series.sort(key=lambda s: (not s.parity_pass, s.median_us if s.median_us is not None else float("inf")))
    shape = next(iter(newest.values())).shape if newest else (winner.shape if winner else f"{n}x{k}")
    return PointDistributions(arch, phase, format_name, m, n, k, shape, winner, series, kernel)


@dataclass
class MeasurementDetail:
    measurement: Measurement
    variant: str
    artifact: Artifact | None
    resources: list[tuple[str, list[tuple[str, str]], list[str], list[str]]]


# nested analyses shown as sentences (workers/isa/summary.py), not as key/value rows
SUMMARISED = ("diagnosis", "liveness", "hot_loop")


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        pairs: list[tuple[str, str]] = []
        for key, item in value.items():
            if key in SUMMARISED:
                continue
            pairs.extend(_flatten(item, f"{prefix}{key}." if isinstance(item, dict) else f"{prefix}{key}"))
        return pairs
    if isinstance(value, list):
        return [(prefix.rstrip("."), ", ".join(str(v) for v in value))]
    return [(prefix.rstrip("."), str(value))]


def isa_lines(entry: dict[str, Any]) -> list[str]:
    """Register liveness and hot-loop sentences of one stored ISA record (empty when it has none)."""
    liveness = entry.get("liveness") if isinstance(entry.get("liveness"), dict) else None
    loop = entry.get("hot_loop") if isinstance(entry.get("hot_loop"), dict) else None
    lines = liveness_lines(liveness) + hot_loop_lines(loop)
    if entry.get("disassembly_error"):
        lines.append(f"no disassembly: {entry['disassembly_error']}")
    return lines


def resource_sections(
    resources: dict[str, Any], variant: str
) -> list[tuple[str, list[tuple[str, str]], list[str], list[str]]]:
    """Show what the backend stored, whatever its shape: one section per kernel-like entry.

    Entries whose name mentions this variant come first; diagnosis lines are pulled out of any entry,
    and so are the liveness / hot-loop analyses (as sentences).
    """
    entries: list[tuple[str, dict[str, Any]]] = []
    kernels = resources.get("kernels")
    if isinstance(kernels, list):
        entries = [(str(k.get("name", i)), k) for i, k in enumerate(kernels) if isinstance(k, dict)]
    elif isinstance(kernels, dict):
        entries = [(str(name), k) for name, k in kernels.items() if isinstance(k, dict)]
    elif resources and all(isinstance(v, dict) for v in resources.values()):
        entries = [(str(name), v) for name, v in resources.items()]
    elif resources:
        entries = [("artifact", resources)]
    token = variant.lower().replace("/", "_")
    entries.sort(key=lambda e: token not in e[0].lower())
    sections = []
    for name, entry in entries:
        diagnosis = entry.get("diagnosis") or []
        lines = [str(d) for d in diagnosis] if isinstance(diagnosis, list) else [str(diagnosis)]
        sections.append((name, _flatten(entry), lines, isa_lines(entry)))
    return sections


def measurement_detail(session: Session, measurement_id: int) -> MeasurementDetail | None:
    measurement = session.get(Measurement, measurement_id)
    if measurement is None:
        return None
    artifact = session.get(Artifact, measurement.artifact_id) if measurement.artifact_id else None
    variant = measurement.variant.name
    sections = resource_sections(dict(artifact.resources or {}), variant) if artifact else []
    return MeasurementDetail(measurement, variant, artifact, sections)


def recent_tables(session: Session, limit: int = MAX_TABLES) -> list[TableVersion]:
    return list(session.scalars(select(TableVersion).order_by(TableVersion.id.desc()).limit(limit)).all())


@dataclass(frozen=True)
class SweepDetail:
    sweep: Sweep
    status: dict[str, Any]
    tasks: list[Task]


def sweep_detail(session: Session, sweep_id: int, presence: Presence | None) -> SweepDetail | None:
    """A sweep's status (with why it waits) and every task with its state, attempts and error."""
    sweep = session.get(Sweep, sweep_id)
    if sweep is None:
        return None
    tasks = list(session.scalars(select(Task).where(Task.sweep_id == sweep_id).order_by(Task.id)).all())
    return SweepDetail(sweep, sweep_status_body(session, sweep, presence), tasks)


@dataclass(frozen=True)
class VariantIsa:
    """One stored pre-screen row as the dashboard's ISA panel shows it."""

    arch: str
    format: str
    variant: str
    ok: bool
    error: str | None
    resources: dict[str, Any]
    lines: list[str]

    def get(self, *path: str) -> Any:
        """resources[path[0]][path[1]]... or None where any step is missing."""
        value: Any = self.resources
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value


def kernel_isa(session: Session, kernel: str, version: str, arch: str | None = None) -> list[VariantIsa]:
    """Every stored ISA analysis of one package version (optionally one arch), by arch/format/variant."""
    from service.kernel_analysis_store import stored_analyses

    rows = []
    for row in stored_analyses(session, kernel, version, arch):
        resources = dict(row.resources or {})
        lines = isa_lines(resources) + [str(d) for d in resources.get("diagnosis") or []]
        rows.append(VariantIsa(row.arch, row.format, row.variant, row.ok, row.error, resources, lines))
    return rows
