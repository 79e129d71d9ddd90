"""Keep the winners table in step with measurements, one point at a time.

Per variant the newest non-stale measurement is a candidate, with its per-dispatch
device times from the dispatches table. Imported summaries (no dispatch rows) take
part with their min, mean, stddev and run count; see service.statistics.winners and
service.statistics.summaries for how such comparisons decide.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from kernels.formats.registry import FORMATS
from kernels.packages.loader import BUILTIN_FOR_PHASE
from service.config import get_settings
from service.db.models import Device, Dispatch, Measurement, TableVersion, Variant, Winner, utcnow
from service.db.queries import at_point
from service.db.upsert import get_or_create
from service.statistics.bootstrap import stable_seed
from service.statistics.staleness import stale_flags
from service.statistics.summaries import SummaryStats
from service.statistics.winners import Candidate, Decision, choose_winner, infer_raced_out


@dataclass(frozen=True)
class PointMeasurement:
    measurement: Measurement
    variant: Variant
    stale: bool


def point_measurements(
    session: Session,
    arch: str,
    phase: str,
    format_name: str,
    m: int,
    n: int,
    k: int,
    kernel: str | None = None,
) -> list[PointMeasurement]:
    """Every measurement of one package (default: the phase's built-in) with a median at the point,
    oldest first, each flagged stale or not."""
    rows = session.execute(
        select(Measurement, Variant, Device)
        .join(Variant, Measurement.variant_id == Variant.id)
        .outerjoin(Device, Measurement.device_id == Device.id)
        .where(
            *at_point(arch, phase, format_name, m, n, k, kernel or BUILTIN_FOR_PHASE[phase]),
            Measurement.median_us.is_not(None),
        )
        .order_by(Measurement.id)
    ).all()
    stale = stale_flags((measurement, device) for measurement, _, device in rows)
    return [PointMeasurement(measurement, variant, stale[measurement.id]) for measurement, variant, _ in rows]


def newest_per_variant(items: list[PointMeasurement]) -> dict[str, PointMeasurement]:
    """Per variant the newest non-stale measurement, else (visible, flagged) its newest stale one."""
    chosen: dict[str, PointMeasurement] = {}
    for item in items:  # oldest first: later rows replace earlier ones of the same kind
        name = item.variant.name
        previous = chosen.get(name)
        if previous is None or previous.stale or not item.stale:
            chosen[name] = item
    return chosen


def dispatch_times_us(session: Session, measurement_ids: list[int]) -> dict[int, tuple[float, ...]]:
    """Per measurement its device times in µs, in dispatch order; absent when it has no rows."""
    times: dict[int, list[float]] = defaultdict(list)
    if not measurement_ids:
        return {}
    rows = session.execute(
        select(Dispatch.measurement_id, Dispatch.device_ns)
        .where(Dispatch.measurement_id.in_(measurement_ids))
        .order_by(Dispatch.measurement_id, Dispatch.seq)
    )
    for measurement_id, device_ns in rows:
        times[measurement_id].append(device_ns / 1000.0)
    return {key: tuple(values) for key, values in times.items()}


def incumbent_variant(
    session: Session, arch: str, phase: str, codebook: int, m: int, n: int, k: int, kernel: str | None = None
) -> str | None:
    """The variant the newest table of this (arch, phase, package), any dialect, chose for the key, if any.

    Same rows as service.tables.versions.latest_version, queried here directly so that
    winner selection does not import the table generator.
    """
    version = session.scalar(
        select(TableVersion)
        .where(
            TableVersion.arch == arch,
            TableVersion.phase == phase,
            TableVersion.kernel == (kernel or BUILTIN_FOR_PHASE[phase]),
        )
        .order_by(TableVersion.id.desc())
        .limit(1)
    )
    for entry in (version.entries or []) if version is not None else []:
        if (entry.get("codebook"), entry.get("m"), entry.get("n"), entry.get("k")) == (codebook, m, n, k):
            variant = entry.get("variant")
            return str(variant) if variant is not None else None
    return None


def candidates_for(session: Session, chosen: dict[str, PointMeasurement]) -> list[Candidate]:
    """A variant a race dropped (fewer dispatches than others of its task) must not win a tie-break."""
    times = dispatch_times_us(session, [item.measurement.id for item in chosen.values()])
    raced_out = infer_raced_out(
        {name: (item.measurement.task_id, item.measurement.n_dispatches) for name, item in chosen.items()}
    )
    return [
        Candidate(
            variant=name,
            median_us=float(item.measurement.median_us or 0.0),
            parity_pass=item.measurement.parity_pass,
            measurement_id=item.measurement.id,
            declared_order=item.variant.declared_order,
            times_us=times.get(item.measurement.id),
            stale=item.stale,
            raced_out=name in raced_out,
            summary=None if item.measurement.id in times else summary_of(item.measurement),
        )
        for name, item in chosen.items()
    ]


def summary_of(measurement: Measurement) -> SummaryStats | None:
    """An imported summary's statistics, when it has all of them (min, mean, stddev, run count)."""
    m = measurement
    if m.min_us is None or m.mean_us is None or m.stddev_us is None or not m.summary_samples:
        return None
    if m.min_us <= 0:
        return None
    return SummaryStats(m.min_us, m.mean_us, m.stddev_us, m.summary_samples)


def decide_point(
    session: Session,
    arch: str,
    phase: str,
    format_name: str,
    m: int,
    n: int,
    k: int,
    min_effect: float | None = None,
    kernel: str | None = None,
) -> tuple[Decision | None, dict[str, PointMeasurement]]:
    """The decision for one point without writing anything (the winners row is refresh_point's job)."""
    chosen = newest_per_variant(point_measurements(session, arch, phase, format_name, m, n, k, kernel))
    codebook = FORMATS[format_name].codebook
    decision = choose_winner(
        candidates_for(session, chosen),
        min_effect=get_settings().min_effect if min_effect is None else min_effect,
        incumbent=incumbent_variant(session, arch, phase, codebook, m, n, k, kernel),
        seed=stable_seed(arch, phase, format_name, m, n, k),
    )
    return decision, chosen


def refresh_point(
    session: Session,
    arch: str,
    phase: str,
    format_name: str,
    m: int,
    n: int,
    k: int,
    min_effect: float | None = None,
    kernel: str | None = None,
) -> Winner | None:
    """Recompute and store the winner of one point of one package; deletes it when none is eligible."""
    kernel = kernel or BUILTIN_FOR_PHASE[phase]
    decision, chosen = decide_point(session, arch, phase, format_name, m, n, k, min_effect, kernel)
    point = at_point(arch, phase, format_name, m, n, k, kernel, model=Winner)
    if decision is None:
        session.execute(delete(Winner).where(*point))
        return None
    chosen_row = chosen[decision.winner.variant].measurement
    medians = {s.variant: s.median_us for s in decision.stats}
    # Two workers finishing the same new point at once must not both insert (uq_winner_point):
    # create-if-missing waits for the other transaction, and the row lock orders the two updates.
    winner = get_or_create(
        session,
        Winner,
        {"arch": arch, "phase": phase, "kernel": kernel, "format": format_name, "m": m, "n": n, "k": k},
        {
            "codebook": FORMATS[format_name].codebook,
            "shape": chosen_row.shape,
            "variant": decision.winner.variant,
            "measurement_id": chosen_row.id,
            "median_us": medians[decision.winner.variant],
            "decided": False,
            "tie_group": [],
            "sweep_ids": [],
            "computed_at": utcnow(),
        },
        lock=True,
    )
    winner.codebook = FORMATS[format_name].codebook
    winner.shape = chosen_row.shape
    winner.variant = decision.winner.variant
    winner.kernel_version = chosen_row.kernel_version
    winner.measurement_id = chosen_row.id
    winner.median_us = medians[decision.winner.variant]
    winner.runner_up = decision.runner_up.variant if decision.runner_up else None
    winner.runner_up_median_us = medians[decision.runner_up.variant] if decision.runner_up else None
    winner.margin = decision.margin
    winner.margin_ci_lo = decision.margin_ci[0] if decision.margin_ci else None
    winner.margin_ci_hi = decision.margin_ci[1] if decision.margin_ci else None
    winner.decided = decision.decided
    winner.tie_group = list(decision.tie_group)
    winner.sweep_ids = sorted(
        {
            i.measurement.sweep_id
            for i in chosen.values()
            if not i.stale and i.measurement.sweep_id is not None
        }
    )
    winner.computed_at = utcnow()
    return winner
