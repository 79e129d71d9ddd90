"""Query fragments several modules share, so "the measurements of one point" means one thing everywhere."""

from __future__ import annotations

from sqlalchemy import ColumnElement

from service.db.models import Measurement


def at_point(
    arch: str, phase: str, format_name: str, m: int, n: int, k: int, kernel: str | None = None
) -> tuple[ColumnElement[bool], ...]:
    """WHERE conditions selecting the measurements of one (arch, phase, format, M, N, K) point, of one
    kernel package when given (winners of different packages never mix)."""
    kernel_condition = () if kernel is None else (Measurement.kernel == kernel,)
    return (
        *kernel_condition,
        Measurement.arch == arch,
        Measurement.phase == phase,
        Measurement.format == format_name,
        Measurement.m == m,
        Measurement.n == n,
        Measurement.k == k,
    )
