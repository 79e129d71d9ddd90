"""The neighbours fallback (service.tables.neighbours): regret vectors interpolated between shapes,
answers only among variants valid at the query, estimator and bandwidth by inner leave-one-shape-out."""

from __future__ import annotations

import itertools
import math

import numpy as np

from kernels.formats.registry import FORMATS
from kernels.packages.loader import builtin_packages
from kernels.packages.package import DeviceFacts
from service.tables.model import MeasuredPoint
from service.tables.neighbours import (
    BANDWIDTHS,
    METHODS,
    RegretKernel,
    fit_neighbours,
    neighbours_answer,
    neighbours_tree,
)
from service.tables.policy import fit_policy
from service.tables.validity import PackageValidity, always_valid, validity_for
from tests.tables.conftest import grid_points

NS = (256, 512, 1024, 2048, 4096, 8192)
KS = (512, 1024, 2048, 4096)
VARIANTS = ("A", "B", "C", "D")


def no_d_above_2048(variant: str, codebook: int, m: int, n: int, k: int) -> bool:
    """D cannot run at K > 2048 (like a K slice that no longer fits shared memory)."""
    return variant != "D" or k <= 2048


def times(m: int, n: int, k: int) -> dict[str, float]:
    """A wins small work, B large work, C is 2% off the best everywhere, D wins small N at long K but
    is only timed where it is valid."""
    work = math.log2(n * k)
    base = n * k / 1e6 + 3.0
    out = {
        "A": base * (1.0 + 0.04 * max(0.0, work - 20)),
        "B": base * (1.0 + 0.04 * max(0.0, 20 - work)),
    }
    out["C"] = min(out.values()) * 1.02
    if k <= 2048:
        out["D"] = min(out.values()) * (0.9 if n <= 512 and k == 2048 else 1.3)
    return {v: t * (1 + 0.1 * m) for v, t in out.items()}


def measured() -> list[MeasuredPoint]:
    return grid_points(times, (1, 2), NS, KS)


def held_out(points: list[MeasuredPoint], shape: tuple[int, int]) -> tuple[list[MeasuredPoint], list]:
    return [p for p in points if (p.n, p.k) != shape], [p for p in points if (p.n, p.k) == shape]


def test_held_out_regret_matches_refitting_without_each_shape() -> None:
    """RegretKernel.held_out (one weight matrix, zero diagonal) answers as a kernel built without the
    shape does."""
    points = [p for p in measured() if p.m == 1]
    kernel = RegretKernel.of(points, VARIANTS, no_d_above_2048)
    for bandwidth, method in itertools.product(((0.5, 0.75), (1.0, 1.0)), METHODS):
        fast = kernel.held_out(bandwidth, method)
        for i, p in enumerate(points):
            rest = RegretKernel.of([q for q in points if q is not p], VARIANTS, no_d_above_2048)
            ok = np.array([[no_d_above_2048(v, 0, p.m, p.n, p.k) for v in VARIANTS]])
            row = rest.predict([p.n], [p.k], bandwidth, ok, method)[0]
            chosen = VARIANTS[int(np.argmin(row))]
            assert p.times_us is not None
            assert math.isclose(fast[i], p.times_us[chosen] / min(p.times_us.values()) - 1.0)


def test_answers_are_valid_at_the_query_and_near_best() -> None:
    points = measured()
    for shape in [(512, 4096), (4096, 1024), (2048, 2048)]:
        train, held = held_out(points, shape)
        answer = neighbours_answer(fit_neighbours(train, no_d_above_2048))
        for p in held:
            variant = answer(p)
            assert variant is not None and no_d_above_2048(variant, 0, p.m, p.n, p.k)
            assert p.times_us is not None
            assert p.times_us[variant] / min(p.times_us.values()) - 1.0 <= 0.05


def test_bandwidth_comes_from_the_grid_and_ignores_the_held_out_shape() -> None:
    points = measured()
    train, held = held_out(points, (1024, 2048))
    model = fit_neighbours(train, no_d_above_2048)[0]
    assert model.bandwidth[0] in BANDWIDTHS and model.bandwidth[1] in BANDWIDTHS
    changed = [p for p in train] + [
        MeasuredPoint(0, p.m, p.n, p.k, p.shape, "C", {"A": 9.0, "B": 9.0, "C": 1.0}) for p in held
    ]
    again = fit_neighbours([p for p in changed if (p.n, p.k) != (1024, 2048)], no_d_above_2048)[0]
    assert again.bandwidth == model.bandwidth


def plane_points(slope: float) -> list[MeasuredPoint]:
    """A's regret rises by ``slope`` per octave of N from N = 256 (B the best everywhere): a trend."""
    return [
        MeasuredPoint(0, 1, n, k, f"{n}x{k}", "B", {"A": 10.0 * (1 + slope * math.log2(n / 256)), "B": 10.0})
        for n in NS
        for k in KS
    ]


def test_linear_estimator_reads_a_trend_at_the_edge_the_mean_averages_away() -> None:
    """At the edge of the measured range the weighted mean sees only one side of the query; the
    linear estimator's intercept follows the trend (its slope shrunk by the ridge, so not exactly)."""
    points = plane_points(0.04)
    kernel = RegretKernel.of(points, ("A", "B"), always_valid)
    ok = np.ones((1, 2), dtype=bool)
    truth = 0.04 * math.log2(200 / 256)  # below the range: A is (nominally) faster than B there
    constant = kernel.predict([200], [1024], (0.75, 0.75), ok, "constant")[0, 0]
    linear = kernel.predict([200], [1024], (0.75, 0.75), ok, "linear")[0, 0]
    assert abs(linear - truth) < abs(constant - truth)
    inside = kernel.predict([1448], [1448], (0.75, 0.75), ok, "linear")[0, 0]
    assert abs(inside - 0.04 * math.log2(1448 / 256)) < 0.01


def test_estimator_comes_from_methods_by_inner_loso() -> None:
    model = fit_neighbours(plane_points(0.04), always_valid)[0]
    assert model.method in METHODS
    only = fit_neighbours(plane_points(0.04), always_valid, methods=("constant",))[0]
    assert only.method == "constant"
    assert model.inner_regret is not None and only.inner_regret is not None
    assert model.inner_regret <= only.inner_regret  # the joint grid contains the constant-only one


def test_emitted_tree_answers_valid_variants_everywhere_on_the_measured_range() -> None:
    model = fit_neighbours(measured(), no_d_above_2048)[0]
    tree = neighbours_tree(model)
    for m in (1, 2):
        for n in (200, 300, 777, 1500, 3000, 6000, 9000):
            for k in (512, 1536, 2048, 2304, 3072, 4096, 6144):
                variant = tree.answer(m, n, k)
                assert variant is not None and no_d_above_2048(variant, 0, m, n, k)


def test_policy_takes_neighbours_only_with_times_and_records_its_score() -> None:
    points = measured()
    fallback = fit_policy(points, ("tree", "neighbours"), validity=no_d_above_2048)
    choice = fallback.choices[0]
    assert choice.neighbours_cv is not None and choice.tree_cv is not None
    assert choice.policy == ("neighbours" if choice.neighbours_cv < choice.tree_cv else "tree")
    untimed = [MeasuredPoint(p.codebook, p.m, p.n, p.k, p.shape, p.winner) for p in points]
    assert fit_policy(untimed, ("tree", "neighbours")).choices[0].policy == "tree"


def test_header_line_names_the_neighbours_estimator_and_bandwidth() -> None:
    choice = fit_policy(measured(), ("neighbours",), validity=no_d_above_2048).choices[0]
    model = fit_neighbours(measured(), no_d_above_2048)[0]
    assert choice.policy == "neighbours"
    assert f"neighbours {model.method} estimator, bandwidth {model.bandwidth[0]:g}" in choice.describe()


def test_package_validity_is_the_package_restrictions() -> None:
    package = builtin_packages()["tb-decode"]
    valid = validity_for(["MX4/KB1/RW2/U2/RG1/PG2/PP2"], "sm_90")
    assert isinstance(valid, PackageValidity) and not valid.reads_n
    facts = DeviceFacts("cuda", "sm_90", 132, 32)
    for name in ("MX4/KB1/RW2/U2/RG1/PG2/PP2", "MX4/KB4/RW2/U2/RG1/PG0/PP1", "MX1/KB1/RW1/U4/RG1/PG0/PP2"):
        variant = package.parse(name, "cuda")
        for m, n, k in ((1, 4096, 4096), (4, 5120, 17408), (3, 24576, 16384), (2, 640, 16384)):
            values = package.bindings(variant, n, k, m, FORMATS["Q4_0"], facts)
            assert valid(name, 0, m, n, k) == (not package.point_problems(values))
    assert not valid("MX4/KB1/RW2/U2/RG1/PG2/PP2", 0, 4, 5120, 17408)  # the ring's shared memory
    assert validity_for(["KB8/TW24"], "sm_90") is always_valid  # an older space: times alone decide


def no_d_above_8192(variant: str, codebook: int, m: int, n: int, k: int) -> bool:
    """D's K slice stops fitting shared memory above the measured K range."""
    return variant != "D" or k <= 8192


def d_wins_long_k(m: int, n: int, k: int) -> dict[str, float]:
    """D is 10% ahead wherever K >= 2048: extrapolating the measured range, a tree would keep it."""
    base = n * k / 1e6 + 3.0
    return {"A": base, "B": base * 1.05, "D": base * (0.9 if k >= 2048 else 1.2)}


def test_emitted_trees_never_answer_a_variant_ruled_out_above_the_measured_k() -> None:
    from service.tables.surrogate import fit_surrogate_trees

    points = grid_points(d_wins_long_k, (1, 2), NS, KS)
    trees = {
        "neighbours": neighbours_tree(fit_neighbours(points, no_d_above_8192)[0]),
        "surrogate": fit_surrogate_trees(points, None, no_d_above_8192)[0],
    }
    for policy, tree in trees.items():
        assert tree.answer(1, 1024, 4096) == "D", policy  # D does win where it can run
        for m, n, k in itertools.product((1, 2), (300, 4096, 20000), (16384, 28672, 53248, 65536)):
            assert tree.answer(m, n, k) in ("A", "B"), (policy, m, n, k)
