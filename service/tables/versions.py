"""From stored winners to a stored, validated table version (one per content change)."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import asdict
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import Measurement, TableVersion, Variant, Winner
from service.tables.dialects import get_dialect
from service.tables.generate import generate_decode_table
from service.tables.model import DecodeChoice, PointKey, PointTimes


class NoWinners(LookupError):
    """Nothing measured for this (arch, phase): there is no table to generate."""


def _variant_times(
    session: Session, arch: str, phase: str
) -> dict[tuple[str, int, int, int], dict[str, float]]:
    """Newest parity-passing median of every variant at every point: regret needs all of them."""
    rows = session.execute(
        select(
            Measurement.format,
            Measurement.m,
            Measurement.n,
            Measurement.k,
            Variant.name,
            Measurement.median_us,
        )
        .join(Variant, Measurement.variant_id == Variant.id)
        .where(
            Measurement.arch == arch,
            Measurement.phase == phase,
            Measurement.parity_pass.is_(True),
            Measurement.median_us.is_not(None),
        )
        .order_by(Measurement.id)
    ).all()
    times: dict[tuple[str, int, int, int], dict[str, float]] = defaultdict(dict)
    for format_name, m, n, k, variant, median in rows:
        if median is not None:
            times[(format_name, m, n, k)][variant] = float(median)
    return times


def collapse_aliases(
    winners: list[Winner], times: dict[tuple[str, int, int, int], dict[str, float]]
) -> tuple[list[DecodeChoice], list[PointTimes]]:
    """One choice per (codebook, M, N, K): the variant whose worst alias-relative time is lowest."""
    dialect = get_dialect("llaminar-rocm-decode")
    by_point: dict[PointKey, list[Winner]] = defaultdict(list)
    for winner in winners:
        by_point[(winner.codebook, winner.m, winner.n, winner.k)].append(winner)
    choices: list[DecodeChoice] = []
    point_times: list[PointTimes] = []
    for (codebook, m, n, k), group in sorted(by_point.items()):
        alias_times = [times.get((w.format, m, n, k), {}) for w in group]
        common = set.intersection(*(set(t) for t in alias_times)) if alias_times else set()
        relative = {variant: max(t[variant] / min(t.values()) for t in alias_times) for variant in common}
        if relative:
            chosen_variant = min(relative, key=lambda v: (relative[v], v))
        else:
            chosen_variant = min(group, key=lambda w: w.median_us).variant
        representative = min(group, key=lambda w: (w.format, w.id))
        kb, tw = dialect.parse_variant(chosen_variant)
        median = alias_times[group.index(representative)].get(chosen_variant, representative.median_us)
        choices.append(
            DecodeChoice(
                codebook=codebook,
                formats=tuple(sorted(w.format for w in group)),
                m=m,
                n=n,
                k=k,
                shape=representative.shape,
                variant=chosen_variant,
                kb=kb,
                target_waves=tw,
                median_us=median,
            )
        )
        if relative:
            point_times.append(PointTimes(codebook, m, n, k, representative.shape, relative))
    return choices, point_times


def generate_and_store(session: Session, arch: str, phase: str, dialect: str) -> TableVersion:
    """Generate from the current winners; store a new version only when the content changed."""
    table_dialect = get_dialect(dialect)
    if table_dialect.phase != phase:
        raise ValueError(f"dialect {dialect!r} emits {table_dialect.phase} tables, not {phase}")
    winners = list(session.scalars(select(Winner).where(Winner.arch == arch, Winner.phase == phase)))
    if not winners:
        raise NoWinners(f"no winners for arch={arch} phase={phase}")
    choices, point_times = collapse_aliases(winners, _variant_times(session, arch, phase))
    sweep_ids = sorted({str(s) for w in winners for s in (w.sweep_ids or [])})
    generated = generate_decode_table(choices, point_times, arch, sweep_ids, dialect)
    sha = hashlib.sha256(generated.text.encode()).hexdigest()
    latest = latest_version(session, arch, phase, dialect)
    if latest is not None and latest.sha256 == sha:
        return latest
    version = TableVersion(
        arch=arch,
        phase=phase,
        dialect=dialect,
        sha256=sha,
        content=generated.text,
        metrics=asdict(generated.metrics),
        entries=[_entry_json(c) for c in choices],
        sweep_ids=[int(s) for s in sweep_ids if s.isdigit()],
        parent_id=latest.id if latest else None,
    )
    session.add(version)
    session.flush()
    return version


def _entry_json(choice: DecodeChoice) -> dict[str, Any]:
    return {
        "codebook": choice.codebook,
        "formats": list(choice.formats),
        "m": choice.m,
        "n": choice.n,
        "k": choice.k,
        "shape": choice.shape,
        "variant": choice.variant,
        "median_us": choice.median_us,
    }


def latest_version(session: Session, arch: str, phase: str, dialect: str) -> TableVersion | None:
    return session.scalar(
        select(TableVersion)
        .where(TableVersion.arch == arch, TableVersion.phase == phase, TableVersion.dialect == dialect)
        .order_by(TableVersion.id.desc())
        .limit(1)
    )


def table_item(version: TableVersion) -> dict[str, Any]:
    metrics = version.metrics or {}
    return {
        "id": version.id,
        "arch": version.arch,
        "phase": version.phase,
        "dialect": version.dialect,
        "sha256": version.sha256,
        "created_at": version.created_at.isoformat() if version.created_at else None,
        "parent_id": version.parent_id,
        "sweep_ids": list(version.sweep_ids or []),
        "metrics": {
            key: metrics.get(key) for key in ("coverage", "exact_hit_rate", "mean_regret", "p95_regret")
        },
        "entries": len(version.entries or []),
    }
