"""Table generation: choices + per-variant times -> fallback, overlays, metrics -> validated text.

Decode and prefill share every step; they differ only by dialect (variant ->
config, M policy and key packing via its codec, render, replay). The generator
refuses to return a table that fails validation; callers store only what comes
back from here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from kernels.packages.package import KernelPackage
from service.tables.dialects import get_dialect
from service.tables.dialects.base import TableDialect
from service.tables.fallback import aspect_class
from service.tables.lookup import TableLookup
from service.tables.metrics import compute_metrics, regret_of
from service.tables.model import (
    KNOWN_CODEBOOKS,
    GeneratedTable,
    HeaderInfo,
    MeasuredPoint,
    PointDecision,
    PointKey,
    PointTimes,
    TableChoice,
)
from service.tables.overlays import entries_of, fallback_regret, select_overlays
from service.tables.policy import POLICIES, Fallback, fit_policy
from service.tables.surrogate import geometry_for
from service.tables.validate import (
    ExpectedAnswer,
    TableExpectations,
    TableValidationError,
    check_choices,
    validate_table,
)
from service.tables.validity import (
    DOMAIN_MAX_K,
    Validity,
    always_valid,
    domain_grid_ks,
    domain_ns,
    domain_violations,
    validity_for,
)

GENERATOR_NAME = "tunebase.tables"
GENERATOR_VERSION = "0.2.0"
DEFAULT_OVERLAY_THRESHOLD = 0.02
DOMAIN_FAILURES_LISTED = 20  # ruled-out answers a failed domain check names (then a count)

# One representative unseen (N, K) per aspect class, used to probe the fallback.
_PROBE_SHAPES: dict[str, tuple[int, int]] = {
    "very_wide": (200064, 4096),
    "wide": (9216, 4096),
    "balanced": (4160, 4096),
    "tall": (4096, 12288),
}


def measured_points(
    choices: Sequence[TableChoice],
    point_times: Sequence[PointTimes],
    known_codebooks: frozenset[int],
    dialect: TableDialect,
) -> list[MeasuredPoint]:
    """Join choices with all-variant times; reject inconsistent data early."""
    failures: list[str] = []
    times_by_point: dict[PointKey, PointTimes] = {}
    for pt in point_times:
        where = f"CB={pt.codebook} M={pt.m} {pt.n}x{pt.k} ({pt.shape})"
        if pt.point in times_by_point:
            failures.append(f"{where}: duplicate point times")
        if pt.codebook not in known_codebooks:
            failures.append(f"{where}: unknown codebook id {pt.codebook}")
        if dialect.codec.m_key(pt.m) != pt.m:
            failures.append(f"{where}: M={pt.m} is not an M-policy bucket")
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
        ties = found.ties if found is not None else frozenset()
        points.append(MeasuredPoint(c.codebook, c.m, c.n, c.k, c.shape, c.variant, times, ties))
    if times_by_point:
        failures += [
            f"CB={p.codebook} M={p.m} {p.n}x{p.k}: times without a choice" for p in times_by_point.values()
        ]
    if failures:
        raise TableValidationError(failures)
    return sorted(points, key=lambda p: p.point)


def fallback_probes(
    fallback: Fallback,
    measured: set[PointKey],
    servable: Callable[[PointKey], bool] = lambda point: True,
) -> list[tuple[PointKey, bool]]:
    """Unseen shapes with whether the fallback must answer them: one per fitted (codebook, M, aspect
    class) of the segments, every aspect class of every M of a tree, plus an unseen M (no answer). A
    probe where no variant of the table is ``servable`` need not be answered (a tree answers nothing
    there). Each M of a tree is also probed at the domain's largest K, answer or not: where every
    kernel's K slice has outgrown shared memory its NO_ANSWER leaf is replayed too."""
    probes: list[tuple[PointKey, bool]] = []
    groups = set(fallback.rules)
    for cb, tree in fallback.trees.items():
        groups |= {(cb, m, aspect) for m in tree.ms for aspect in _PROBE_SHAPES}
    for cb, m, aspect in sorted(groups):
        n, k = _PROBE_SHAPES[aspect]
        while (cb, m, n, k) in measured:
            n += 64
        assert aspect_class(n, k) == aspect
        probes.append(((cb, m, n, k), servable((cb, m, n, k))))
    for cb, tree in sorted(fallback.trees.items()):
        probes += [
            ((cb, m, 4096, DOMAIN_MAX_K), False)
            for m in tree.ms
            if (cb, m, 4096, DOMAIN_MAX_K) not in measured
        ]
    if groups:
        cb = min(cb for cb, _, _ in groups)
        probes.append(((cb, 100000, 4096, 4096), False))  # an M beyond every policy: expect "no answer"
    return probes


def check_domain(
    lookup: TableLookup, validity: Validity, keys: Sequence[tuple[int, int]]
) -> str | list[str] | None:
    """The fallback's answers on the domain grid (service.tables.validity: N and K from 256 to 65536, at
    each (codebook, M key) the table was fitted for) against the package's restrictions: the check's
    line, or one failure per answer a restriction rules out (the first DOMAIN_FAILURES_LISTED), or None
    without restrictions (nothing to check). Exact entries are measured winners: they ran there."""
    if validity is always_valid:
        return None
    bad = domain_violations(lookup.fallback, validity, keys)
    if bad:
        failures = [
            f"CB={cb} M={m} {n}x{k}: answers {variant}, which the package rules out there"
            for (cb, m, n, k), variant in bad[:DOMAIN_FAILURES_LISTED]
        ]
        more = len(bad) - DOMAIN_FAILURES_LISTED
        return failures + ([f"... and {more} more cells of the domain grid"] if more > 0 else [])
    return f"answers valid on the domain grid ({len(domain_ns())} N x {len(domain_grid_ks())} K points)"


def generate_table(
    choices: Sequence[TableChoice],
    point_times: Sequence[PointTimes],
    arch: str,
    sweep_ids: Sequence[str],
    dialect: str = "llaminar-rocm-decode",
    *,
    phase: str | None = None,
    overlay_threshold: float = DEFAULT_OVERLAY_THRESHOLD,
    known_codebooks: frozenset[int] = KNOWN_CODEBOOKS,
    package: KernelPackage | None = None,
    policies: Sequence[str] = POLICIES,
) -> GeneratedTable:
    """Fit the fallback, keep overlays above the threshold, render, measure, validate.

    ``package`` binds package-bound dialects (struct-table) and json to that package's variant names.
    ``policies``: fallback kinds a codebook may take (service.tables.policy chooses by held-out regret)."""
    table_dialect = get_dialect(dialect, phase, package, {c.variant for c in choices})
    if phase is not None and table_dialect.phase != phase:
        raise ValueError(f"dialect {dialect!r} is for phase {table_dialect.phase!r}, not {phase}")
    failures = check_choices(choices, known_codebooks, table_dialect)
    if failures:
        raise TableValidationError(failures)
    points = measured_points(choices, point_times, known_codebooks, table_dialect)
    by_point = {p.point: p for p in points}

    names = sorted({c.variant for c in choices} | {v for t in point_times for v in t.times_us})
    geometry = geometry_for(sorted({c.variant for c in choices}), arch)
    validity = validity_for(names, arch, package)
    fit = fit_policy(points, policies, geometry, validity=validity)
    ordered = sorted(choices, key=lambda c: c.point)
    overlays = select_overlays(ordered, by_point, fit, overlay_threshold)
    lookup = TableLookup(entries_of(overlays), fit.rules, table_dialect.codec.m_key, fit.trees)
    metrics = compute_metrics(
        lookup, points, fit.n_rules, overlay_threshold=overlay_threshold, cv_regret=fit.mean_cv_regret
    )

    sweeps = tuple(sorted(set(sweep_ids)))
    policy_lines = tuple(f"codebook {cb}: {c.describe()}" for cb, c in sorted(fit.choices.items()))
    info = HeaderInfo(
        GENERATOR_NAME, GENERATOR_VERSION, dialect, arch, table_dialect.phase, sweeps, metrics, policy_lines
    )
    text = table_dialect.render(overlays, fit, info)

    def expect(point: PointKey, must_answer: bool) -> ExpectedAnswer:
        variant = lookup.select_point(point)
        config = None if variant is None else table_dialect.parse_variant(variant)
        return ExpectedAnswer(*point, config=config, must_answer=must_answer)

    answers = [expect(p.point, must_answer=True) for p in points]

    def servable(point: PointKey) -> bool:
        return any(validity(v, *point) for v in names)

    for probe, must_answer in fallback_probes(fit, set(by_point), servable):
        answers.append(expect(probe, must_answer=must_answer))
    domain_check = check_domain(lookup, validity, sorted({(p.codebook, p.m) for p in points}))
    variants = {c.variant for c in overlays} | {r.variant for rs in fit.rules.values() for r in rs}
    variants |= {v for tree in fit.trees.values() for v in tree.root.variants()}
    expectations = TableExpectations(
        answers=tuple(answers),
        known_codebooks=known_codebooks,
        allowed_configs=frozenset(table_dialect.parse_variant(v) for v in variants),
        dialect=dialect,
        phase=table_dialect.phase,
        package=package,
        variants=frozenset(c.variant for c in choices),
    )
    report = validate_table(text, expectations)
    if domain_check is not None and not isinstance(domain_check, str):
        report = dataclasses.replace(report, failures=(*report.failures, *domain_check))
    report.raise_for_failures()
    checks = report.checks if domain_check is None else (*report.checks, str(domain_check))

    formats = {c.point: c.formats for c in choices}
    decisions = []
    for p in points:
        variant, source = lookup.select(*p.point)
        decisions.append(
            PointDecision(
                p.codebook, formats[p.point], p.m, p.n, p.k, p.shape, p.winner, variant, source,
                regret_of(p, variant), fallback_regret(p, fit)[1],
            )
        )  # fmt: skip
    return GeneratedTable(
        dialect=dialect,
        arch=arch,
        phase=table_dialect.phase,
        text=text,
        metrics=metrics,
        sweep_ids=sweeps,
        checks=checks,
        entries=tuple(overlays),
        decisions=tuple(decisions),
        fallback_policies={cb: c.policy for cb, c in fit.choices.items()},
    )


def generate_decode_table(
    choices: Sequence[TableChoice],
    point_times: Sequence[PointTimes],
    arch: str,
    sweep_ids: Sequence[str],
    dialect: str = "llaminar-rocm-decode",
    **kwargs: object,
) -> GeneratedTable:
    """Decode convenience wrapper over generate_table."""
    return generate_table(choices, point_times, arch, sweep_ids, dialect, phase="decode", **kwargs)  # type: ignore[arg-type]
