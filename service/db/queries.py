"""Query fragments several modules share, so "the measurements of one point" means one thing everywhere."""

from __future__ import annotations

from sqlalchemy import ColumnElement

from service.db.models import Measurement, Winner


def at_point(
    arch: str, phase: str, format_name: str, m: int, n: int, k: int, kernel: str | None = None,
    model: type[Measurement] | type[Winner] = Measurement,
) -> tuple[ColumnElement[bool], ...]:  # fmt: skip
    """WHERE conditions selecting the measurements (or, with ``model=Winner``, the winner) of one
    (arch, phase, format, M, N, K) point, of one kernel package when given (winners of different packages
    never mix)."""
    kernel_condition = () if kernel is None else (model.kernel == kernel,)
    return (
        *kernel_condition,
        model.arch == arch,
        model.phase == phase,
        model.format == format_name,
        model.m == m,
        model.n == n,
        model.k == k,
    )
