"""From stored winners to a stored, validated table version (one per content change).

A table is of ONE kernel package (DESIGN §9: winners of different packages never mix): ``kernel`` is a
package reference (``name`` or ``name@sha-prefix``), None meaning the phase's built-in package.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import asdict
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernels.packages.loader import BUILTIN_FOR_PHASE
from kernels.packages.package import KernelPackage
from service.config import get_settings
from service.db.models import Measurement, TableVersion, Variant, Winner
from service.kernel_store import resolve
from service.tables.codecs import get_codec
from service.tables.collapse import AliasPoint, collapse_aliases
from service.tables.dialects import default_dialect, dialect_phases, dialect_problem
from service.tables.generate import generate_table
from service.tables.model import GeneratedTable, PointDecision, PointKey


class NoWinners(LookupError):
    """Nothing measured for this (arch, phase): there is no table to generate."""


def _kernel_name(phase: str, kernel: str | None) -> str:
    """A package name (a ``name@version`` reference keeps its name: winners are kept per name)."""
    return kernel.partition("@")[0] if kernel else BUILTIN_FOR_PHASE.get(phase, "")


def winner_variants(session: Session, arch: str, phase: str, kernel: str) -> set[str]:
    """The variant names a table of this package's winners must express."""
    rows = session.scalars(
        select(Winner.variant)
        .where(Winner.arch == arch, Winner.phase == phase, Winner.kernel == kernel)
        .distinct()
    )
    return set(rows)


def default_table_dialect(session: Session, arch: str, phase: str, kernel: str | None = None) -> str:
    """The dialect a table request without one gets: the first that expresses the stored winners' names
    (the package's whole space when nothing is stored yet). PackageNotFound when no package answers."""
    package = resolve(session, kernel, phase)
    return default_dialect(phase, package, winner_variants(session, arch, phase, package.name) or None)


def table_package(
    session: Session, phase: str, dialect: str, kernel: str | None = None, arch: str | None = None
) -> KernelPackage:
    """The package a table request names, checked against the dialect (and, given ``arch``, against the
    variant names of its stored winners there).

    PackageNotFound (a LookupError) when no package answers; ValueError when the dialect cannot emit it."""
    if phase not in dialect_phases(dialect):
        raise ValueError(f"dialect {dialect!r} does not emit {phase} tables")
    package = resolve(session, kernel, phase)
    variants = None if arch is None else winner_variants(session, arch, phase, package.name) or None
    problem = dialect_problem(dialect, package, variants)
    if problem:
        raise ValueError(problem)
    return package


def variant_times(
    session: Session, arch: str, phase: str, kernel: str | None = None
) -> dict[tuple[str, int, int, int], dict[str, float]]:
    """Newest parity-passing median of every variant of one package at every point (regret needs all)."""
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
            Measurement.kernel == _kernel_name(phase, kernel),
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


def incumbents(session: Session, arch: str, phase: str, kernel: str | None = None) -> dict[PointKey, str]:
    """The choice the newest table of this (arch, phase, package), any dialect, made at each measured key.

    The choice (the entry's `winner`: what the alias collapse picked), not the answer: where a fallback
    rule answers within the overlay threshold the two differ, and taking the answer as incumbent would
    change the next choice, so regenerating from unchanged winners would not give the same table."""
    version = session.scalar(
        select(TableVersion)
        .where(
            TableVersion.arch == arch,
            TableVersion.phase == phase,
            TableVersion.kernel == _kernel_name(phase, kernel),
        )
        .order_by(TableVersion.id.desc())
        .limit(1)
    )
    out: dict[PointKey, str] = {}
    for e in (version.entries or []) if version is not None else []:
        choice = e.get("winner") or e.get("variant")
        if choice is not None:
            out[(int(e["codebook"]), int(e["m"]), int(e["n"]), int(e["k"]))] = str(choice)
    return out


def alias_points(session: Session, arch: str, phase: str, kernel: str | None = None) -> list[AliasPoint]:
    """Winners joined with every variant's time and the incumbent, as plain data for the pure steps.

    Prefill points whose M is not a policy bucket are left out: the engine rounds
    M up to a bucket, so an entry keyed by another M could never be looked up.
    """
    codec = get_codec(phase)
    times = variant_times(session, arch, phase, kernel)
    current = incumbents(session, arch, phase, kernel)
    winners = session.scalars(
        select(Winner).where(
            Winner.arch == arch, Winner.phase == phase, Winner.kernel == _kernel_name(phase, kernel)
        )
    )
    return [
        AliasPoint(
            w.format, w.codebook, w.m, w.n, w.k, w.shape, w.variant, w.median_us,
            times.get((w.format, w.m, w.n, w.k), {}), tuple(w.tie_group or ()),
            current.get((w.codebook, w.m, w.n, w.k)),
        )
        for w in winners
        if codec.m_key(w.m) == w.m
    ]  # fmt: skip


def winners_fingerprint(session: Session, arch: str, phase: str, kernel: str | None = None) -> str:
    """A digest of the current winners and times: unchanged digest, nothing to regenerate."""
    digest = hashlib.sha256()
    for a in sorted(alias_points(session, arch, phase, kernel), key=lambda a: (a.point, a.format)):
        digest.update(repr((a.format, a.point, a.winner, sorted(a.times_us.items()))).encode())
    return digest.hexdigest()


def build_table(
    session: Session, arch: str, phase: str, dialect: str, package: KernelPackage | None = None
) -> GeneratedTable:
    """Generate (not store) the table of one package's current winners (default: the phase's built-in);
    raises NoWinners or validation errors."""
    package = package or table_package(session, phase, dialect, arch=arch)
    points = alias_points(session, arch, phase, package.name)
    if not points:
        raise NoWinners(f"no winners for arch={arch} phase={phase} kernel={package.name}")
    collapsed = collapse_aliases(points)
    rows = session.scalars(
        select(Winner.sweep_ids).where(
            Winner.arch == arch, Winner.phase == phase, Winner.kernel == package.name
        )
    )
    sweep_ids = sorted({str(s) for ids in rows for s in (ids or [])})
    return generate_table(
        [c.choice for c in collapsed],
        [c.times for c in collapsed if c.times is not None],
        arch,
        sweep_ids,
        dialect,
        phase=phase,
        overlay_threshold=get_settings().overlay_regret_threshold,
        package=package,
    )


def generate_and_store(
    session: Session, arch: str, phase: str, dialect: str, kernel: str | None = None
) -> TableVersion:
    """Generate from one package's current winners; store a new version only when the content changed."""
    package = table_package(session, phase, dialect, kernel, arch)
    generated = build_table(session, arch, phase, dialect, package)
    sha = hashlib.sha256(generated.text.encode()).hexdigest()
    latest = latest_version(session, arch, phase, dialect, package.name)
    if latest is not None and latest.sha256 == sha:
        return latest
    fingerprint = winners_fingerprint(session, arch, phase, package.name)
    version = TableVersion(
        arch=arch,
        phase=phase,
        dialect=dialect,
        kernel=package.name,
        kernel_version=package.version,
        sha256=sha,
        content=generated.text,
        metrics={
            **asdict(generated.metrics),
            "fingerprint": fingerprint,
            "fallback_policies": {str(cb): p for cb, p in sorted(generated.fallback_policies.items())},
        },
        entries=[decision_json(d) for d in generated.decisions],
        sweep_ids=[int(s) for s in generated.sweep_ids if s.isdigit()],
        parent_id=latest.id if latest else None,
    )
    session.add(version)
    session.flush()
    return version


def decision_json(d: PointDecision) -> dict[str, Any]:
    """One stored entry: what the table answers at a measured point, and at what regret."""
    return {
        "codebook": d.codebook,
        "formats": list(d.formats),
        "m": d.m,
        "n": d.n,
        "k": d.k,
        "shape": d.shape,
        "winner": d.winner,
        "variant": d.variant,
        "source": d.source,
        "regret": d.regret,
        "fallback_regret": d.fallback_regret,
    }


def latest_version(
    session: Session, arch: str, phase: str, dialect: str, kernel: str | None = None
) -> TableVersion | None:
    return session.scalar(
        select(TableVersion)
        .where(
            TableVersion.arch == arch,
            TableVersion.phase == phase,
            TableVersion.dialect == dialect,
            TableVersion.kernel == _kernel_name(phase, kernel),
        )
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
        "kernel": version.kernel,
        "kernel_version": version.kernel_version,
        "sha256": version.sha256,
        "created_at": version.created_at.isoformat() if version.created_at else None,
        "parent_id": version.parent_id,
        "sweep_ids": list(version.sweep_ids or []),
        "metrics": {
            key: metrics.get(key)
            for key in ("coverage", "exact_hit_rate", "exact_entry_rate", "mean_regret", "p95_regret")
        },
        "entries": len(version.entries or []),
    }
