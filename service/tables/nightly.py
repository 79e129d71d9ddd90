"""Nightly regeneration (DESIGN §1, issue 7): every (arch, phase, kernel, dialect) whose winners
changed since its latest version gets a new table; a version is stored only when
the generated content differs from the latest one. Every package gets each dialect that can
express its variants: json always, struct-table with a `[table]` section, Llaminar's includes when the
variant names fit their fields.

Called by the Celery beat task `tunebase.tables.nightly` (workers/tasks.py). Each
target runs in its own savepoint, so one table failing validation neither stops
nor rolls back the others; the failure is reported in the results.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import Winner
from service.kernel_store import PackageNotFound, resolve
from service.tables.dialects import DIALECT_NAMES, ON_REQUEST_ONLY, dialect_problem
from service.tables.validate import TableValidationError
from service.tables.versions import generate_and_store, latest_version, winner_variants, winners_fingerprint


@dataclass(frozen=True)
class NightlyResult:
    """What happened to one target: stored | unchanged_winners | unchanged_content | failed."""

    arch: str
    phase: str
    dialect: str
    status: str
    table_id: int | None = None
    detail: str = ""
    kernel: str = ""


def _dialects_for(session: Session, arch: str, phase: str, kernel: str) -> list[str]:
    try:
        package = resolve(session, kernel, phase)
    except PackageNotFound:
        return []  # winners of a package no longer stored: nothing to generate from
    variants = winner_variants(session, arch, phase, kernel)
    nightly = [name for name in DIALECT_NAMES if name not in ON_REQUEST_ONLY]
    return [name for name in nightly if dialect_problem(name, package, variants) is None]


def targets(session: Session) -> list[tuple[str, str, str, str]]:
    """Every (arch, phase, dialect, kernel) that has winners and a dialect that emits that package."""
    rows = session.execute(select(Winner.arch, Winner.phase, Winner.kernel).distinct()).all()
    return sorted(
        (arch, phase, name, kernel)
        for arch, phase, kernel in rows
        for name in _dialects_for(session, arch, phase, kernel)
    )


def regenerate_one(
    session: Session, arch: str, phase: str, dialect: str, kernel: str | None = None
) -> NightlyResult:
    latest = latest_version(session, arch, phase, dialect, kernel)
    fingerprint = winners_fingerprint(session, arch, phase, kernel)
    name = kernel or ""
    if latest is not None and (latest.metrics or {}).get("fingerprint") == fingerprint:
        return NightlyResult(arch, phase, dialect, "unchanged_winners", latest.id, kernel=name)
    try:
        with session.begin_nested():
            version = generate_and_store(session, arch, phase, dialect, kernel)
    except (TableValidationError, ValueError, LookupError) as error:
        return NightlyResult(arch, phase, dialect, "failed", None, str(error)[:2000], kernel=name)
    if latest is not None and version.id == latest.id:
        # same text from changed winners (e.g. a timing moved, no answer did): remember the
        # fingerprint so the next run does not regenerate for nothing
        latest.metrics = {**(latest.metrics or {}), "fingerprint": fingerprint}
        return NightlyResult(arch, phase, dialect, "unchanged_content", latest.id, kernel=name)
    return NightlyResult(arch, phase, dialect, "stored", version.id, kernel=name)


def regenerate_all(session: Session) -> list[NightlyResult]:
    """Regenerate every target whose winners changed; the caller commits."""
    return [regenerate_one(session, *target) for target in targets(session)]
