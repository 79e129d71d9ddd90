"""Nightly regeneration (DESIGN §1, issue 7): every (arch, phase, dialect) whose winners
changed since its latest version gets a new table; a version is stored only when
the generated content differs from the latest one.

Called by the Celery beat task `tunebase.tables.nightly` (workers/tasks.py). Each
target runs in its own savepoint, so one table failing validation neither stops
nor rolls back the others; the failure is reported in the results.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import Winner
from service.tables.dialects import DIALECTS, dialect_phases
from service.tables.validate import TableValidationError
from service.tables.versions import generate_and_store, latest_version, winners_fingerprint


@dataclass(frozen=True)
class NightlyResult:
    """What happened to one target: stored | unchanged_winners | unchanged_content | failed."""

    arch: str
    phase: str
    dialect: str
    status: str
    table_id: int | None = None
    detail: str = ""


def targets(session: Session) -> list[tuple[str, str, str]]:
    """Every (arch, phase, dialect) that has winners and a dialect that emits its phase."""
    pairs = session.execute(select(Winner.arch, Winner.phase).distinct()).all()
    return sorted(
        (arch, phase, name) for arch, phase in pairs for name in DIALECTS if phase in dialect_phases(name)
    )


def regenerate_one(session: Session, arch: str, phase: str, dialect: str) -> NightlyResult:
    latest = latest_version(session, arch, phase, dialect)
    fingerprint = winners_fingerprint(session, arch, phase)
    if latest is not None and (latest.metrics or {}).get("fingerprint") == fingerprint:
        return NightlyResult(arch, phase, dialect, "unchanged_winners", latest.id)
    try:
        with session.begin_nested():
            version = generate_and_store(session, arch, phase, dialect)
    except (TableValidationError, ValueError, LookupError) as error:
        return NightlyResult(arch, phase, dialect, "failed", None, str(error)[:2000])
    if latest is not None and version.id == latest.id:
        # same text from changed winners (e.g. a timing moved, no answer did): remember the
        # fingerprint so the next run does not regenerate for nothing
        latest.metrics = {**(latest.metrics or {}), "fingerprint": fingerprint}
        return NightlyResult(arch, phase, dialect, "unchanged_content", latest.id)
    return NightlyResult(arch, phase, dialect, "stored", version.id)


def regenerate_all(session: Session) -> list[NightlyResult]:
    """Regenerate every target whose winners changed; the caller commits."""
    return [regenerate_one(session, *target) for target in targets(session)]
