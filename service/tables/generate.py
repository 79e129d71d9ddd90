"""Decode table generation: winners + per-variant times -> validated `.inc` text.

The generator refuses to return a table that fails validation; callers store
only what comes back from here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from service.tables.dialects import get_dialect
from service.tables.dialects.base import RuleMap, TableDialect
from service.tables.fallback import aspect_class, fit_fallback
from service.tables.lookup import DecodeLookup, pack_decode_key
from service.tables.metrics import compute_metrics
from service.tables.model import (
    KNOWN_CODEBOOKS,
    DecodeChoice,
    GeneratedTable,
    HeaderInfo,
    MeasuredPoint,
    PointKey,
    PointTimes,
)
from service.tables.validate import (
    ExpectedAnswer,
    TableExpectations,
    TableValidationError,
    check_choices,
    validate_table,
)

GENERATOR_NAME = "tunebase.tables"
GENERATOR_VERSION = "0.1.0"

# One representative unseen (N, K) per aspect class, used to probe the fallback.
_PROBE_SHAPES: dict[str, tuple[int, int]] = {
    "very_wide": (200064, 4096),
    "wide": (9216, 4096),
    "balanced": (4160, 4096),
    "tall": (4096, 12288),
}


def _measured_points(
    choices: Sequence[DecodeChoice],
    point_times: Sequence[PointTimes],
    known_codebooks: frozenset[int],
    dialect: TableDialect,
) -> list[MeasuredPoint]:
    """Join winners with all-variant times; reject inconsistent data early."""
    failures: list[str] = []
    times_by_point: dict[PointKey, PointTimes] = {}
    for pt in point_times:
        where = f"CB={pt.codebook} M={pt.m} {pt.n}x{pt.k} ({pt.shape})"
        if pt.point in times_by_point:
            failures.append(f"{where}: duplicate point times")
        if pt.codebook not in known_codebooks:
            failures.append(f"{where}: unknown codebook id {pt.codebook}")
        if not pt.times_us:
            failures.append(f"{where}: no variant times")
        for name, t in pt.times_us.items():
            if not (math.isfinite(t) and t > 0):
                failures.append(f"{where}: variant {name} has non-positive time {t}")
            try:
                dialect.parse_variant(name)
            except ValueError as exc:
                failures.append(f"{where}: {exc}")
        times_by_point[pt.point] = pt
    if failures:
        raise TableValidationError(failures)

    points: list[MeasuredPoint] = []
    for c in choices:
        found = times_by_point.pop(c.point, None)
        times = dict(found.times_us) if found is not None else None
        if times is not None and c.variant not in times:
            failures.append(
                f"CB={c.codebook} M={c.m} {c.n}x{c.k}: winner {c.variant} "
                "is not among the point's parity-passing variants"
            )
        points.append(MeasuredPoint(c.codebook, c.m, c.n, c.k, c.shape, c.variant, times))
    for pt in times_by_point.values():  # measured, but no winner was declared
        best = min(sorted(pt.times_us), key=lambda v: pt.times_us[v])
        points.append(MeasuredPoint(pt.codebook, pt.m, pt.n, pt.k, pt.shape, best, dict(pt.times_us)))
    if failures:
        raise TableValidationError(failures)
    return sorted(points, key=lambda p: p.point)


def fallback_probes(rules: RuleMap, measured: Iterable[PointKey]) -> list[PointKey]:
    """Unseen shapes, one per fitted (codebook, M, aspect class), plus an unseen M."""
    seen = set(measured)
    probes: list[PointKey] = []
    for cb, m, aspect in sorted(rules):
        n, k = _PROBE_SHAPES[aspect]
        while (cb, m, n, k) in seen:
            n += 64
        assert aspect_class(n, k) == aspect
        probes.append((cb, m, n, k))
    if rules:
        cb = min(cb for cb, _, _ in rules)
        probes.append((cb, 255, 4096, 4096))  # an M nobody tuned: expect "no answer"
    return probes


def generate_decode_table(
    choices: Sequence[DecodeChoice],
    point_times: Sequence[PointTimes],
    arch: str,
    sweep_ids: Sequence[str],
    dialect: str = "llaminar-rocm-decode",
    *,
    known_codebooks: frozenset[int] = KNOWN_CODEBOOKS,
) -> GeneratedTable:
    """Fit the fallback, render, compute metrics and validate; raises on any defect."""
    table_dialect = get_dialect(dialect)
    if table_dialect.phase != "decode":
        raise ValueError(f"dialect {dialect!r} is for phase {table_dialect.phase!r}, not decode")

    failures = check_choices(choices, known_codebooks, table_dialect)
    if failures:
        raise TableValidationError(failures)
    points = _measured_points(choices, point_times, known_codebooks, table_dialect)

    rules = fit_fallback(points)
    entries: dict[int, dict[int, str]] = {}
    for c in choices:
        entries.setdefault(c.codebook, {})[pack_decode_key(c.m, c.n, c.k)] = c.variant
    lookup = DecodeLookup(entries, rules)
    n_rules = sum(len(r) for r in rules.values())
    metrics = compute_metrics(lookup, points, n_rules)

    sweeps = tuple(sorted(set(sweep_ids)))
    info = HeaderInfo(GENERATOR_NAME, GENERATOR_VERSION, dialect, arch, sweeps, metrics)
    text = table_dialect.render(choices, rules, info)

    def expect(point: PointKey, must_answer: bool) -> ExpectedAnswer:
        variant = lookup.select_point(point)
        config = None if variant is None else table_dialect.parse_variant(variant)
        return ExpectedAnswer(*point, config=config, must_answer=must_answer)

    answers = [expect(p.point, must_answer=True) for p in points]
    for probe in fallback_probes(rules, (p.point for p in points)):
        has_rules = (probe[0], probe[1], aspect_class(probe[2], probe[3])) in rules
        answers.append(expect(probe, must_answer=has_rules))
    variants = {p.winner for p in points} | {r.variant for rs in rules.values() for r in rs}
    expectations = TableExpectations(
        answers=tuple(answers),
        known_codebooks=known_codebooks,
        allowed_configs=frozenset(table_dialect.parse_variant(v) for v in variants),
        dialect=dialect,
    )
    report = validate_table(text, expectations)
    report.raise_for_failures()
    return GeneratedTable(
        dialect=dialect,
        arch=arch,
        phase=table_dialect.phase,
        text=text,
        metrics=metrics,
        sweep_ids=sweeps,
        checks=report.checks,
    )
