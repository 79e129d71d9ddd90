"""Race-free get-or-create: INSERT ... ON CONFLICT DO NOTHING, then read the row back.

Select-then-insert loses when two workers create the same row at once (the second commit fails on
the unique constraint and the whole result transaction with it). With ON CONFLICT the second insert
waits for the first transaction and then does nothing; the read that follows sees the winner's row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.db.models import Base

M = TypeVar("M", bound=Base)


def insert_ignoring_conflict(
    session: Session, model: type[Base], values: dict[str, Any], keys: Sequence[str]
) -> None:
    """Insert one row unless a row with the same `keys` (a unique constraint) exists or is being inserted."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        statement: Any = postgresql.insert(model).values(**values).on_conflict_do_nothing(index_elements=keys)
    elif dialect == "sqlite":
        statement = sqlite.insert(model).values(**values).on_conflict_do_nothing(index_elements=keys)
    else:  # pragma: no cover - only Postgres and SQLite are supported
        raise ValueError(f"unsupported database dialect {dialect!r}")
    session.execute(statement)


def get_or_create(
    session: Session, model: type[M], keys: dict[str, Any], values: dict[str, Any], lock: bool = False
) -> M:
    """The row matching `keys`, created with `values` when missing; `lock` holds it until commit."""
    query = select(model).filter_by(**keys)
    if lock:
        query = query.with_for_update()
    row = session.scalar(query)
    if row is None:
        insert_ignoring_conflict(session, model, {**values, **keys}, list(keys))
        row = session.scalar(query.execution_options(populate_existing=True))
    assert row is not None, f"{model.__name__} {keys} vanished after insert"
    return row
