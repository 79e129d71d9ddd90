"""The neighbours fallback (service.tables.neighbours): regret vectors interpolated between shapes,
answers only among variants valid at the query, estimator and bandwidth by inner leave-one-shape-out."""

from __future__ import annotations

import itertools
import math

import numpy as np
from pytest import MonkeyPatch

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


def b_wins_at_n_2048(m: int, n: int, k: int) -> dict[str, float]:
    """A is the best everywhere but at N = 2048, where B is 5% ahead at every K (a quirk of one N,
    like the wave quantisation of B's tiles there) and 8% behind elsewhere; C is 2% off everywhere."""
    base = n * k / 1e6 + 3.0
    return {"A": base, "B": base * (0.95 if n == 2048 else 1.08), "C": base * 1.02}


def test_additive_estimator_reads_the_quirk_of_the_held_out_n_from_its_row() -> None:
    """Held out at N = 2048, the shape's N neighbours say A and its own row (the other K at N = 2048)
    says B: the smoothing estimators average the row away, the additive one gives N = 2048 its
    own effect and answers B; the inner leave-one-shape-out chooses it for that reason."""
    points = grid_points(b_wins_at_n_2048, (1,), NS, KS)
    train, held = held_out(points, (2048, 1024))
    kernel = RegretKernel.of(train, ("A", "B", "C"), always_valid)
    ok = np.ones((1, 3), dtype=bool)
    for method in ("constant", "linear"):
        assert int(np.argmin(kernel.predict([2048], [1024], (0.75, 0.75), ok, method)[0])) == 0, method
    row = kernel.predict([2048], [1024], (0.75, 0.75), ok, "additive")[0]
    assert int(np.argmin(row)) == 1 and row[0] > 0.03  # A predicted ~5% off, as it is
    assert kernel.predict([3000], [1024], (0.75, 0.75), ok, "additive")[0].argmin() == 0  # not N = 2048
    model = fit_neighbours(train, always_valid)[0]
    assert model.method == "additive"
    assert neighbours_answer({0: model})(held[0]) == "B"
    assert neighbours_tree(model).answer(1, 2048, 1024) == "B"


def d_needs_k_multiple_of_1024(variant: str, codebook: int, m: int, n: int, k: int) -> bool:
    """D reads K in slices of whole 1024-weight stages (as RG16 KB4 does)."""
    return variant != "D" or k % 1024 == 0


def d_wins_where_it_runs(m: int, n: int, k: int) -> dict[str, float]:
    base = n * k / 1e6 + 3.0
    out = {"A": base, "B": base * 1.05}
    if k % 1024 == 0:
        out["D"] = base * 0.9
    return out


def test_emitted_tree_answers_a_divisibility_restricted_variant_exactly_where_it_runs() -> None:
    """D is 10% ahead at every K it can run (multiples of 1024): the tree answers it at the held-out
    K = 3072 and at every other multiple of 1024 inside the range, and never at a multiple of 256 in
    between (a grid K's neighbours all invalid used to keep D out of the tree altogether)."""
    ks = (1024, 1280, 2048, 2304, 4096, 4352)
    points = grid_points(d_wins_where_it_runs, (1,), NS, ks) + grid_points(
        d_wins_where_it_runs, (1,), NS, (3072,)
    )
    train = [p for p in points if p.k != 3072]
    tree = neighbours_tree(fit_neighbours(train, d_needs_k_multiple_of_1024)[0])
    for n in (300, 1024, 3000, 8192):
        for k in range(1024, 4352 + 1, 256):
            variant = tree.answer(1, n, k)
            assert d_needs_k_multiple_of_1024(variant or "", 0, 1, n, k), (n, k, variant)
            if k % 1024 == 0:
                assert variant == "D", (n, k, variant)


def test_k_regions_hold_every_multiple_of_256_a_leaf_answers() -> None:
    """Each grid K's region runs to the tree's cuts (isqrt of neighbouring products), so the regions
    partition the multiples of 256 up to the last grid K; a hole at 2304 (between 2048 and 2560, past
    their cut at 2289) rules the variant out at 2560 and not at 2048."""
    from service.tables.tree import split_threshold
    from service.tables.validity import grid_validity, k_regions, quantum_ks

    ks = quantum_ks([512, 2048, 2560, 8192], 2048, 4096)
    assert ks == [512, 2048, 2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096, 8192]
    regions = k_regions(ks)
    assert sorted(k for r in regions for k in r) == list(range(256, 8192 + 1, 256))
    for k, region, lo, hi in zip(ks, regions, [0, *ks], [*ks[1:], 0], strict=False):
        assert k in region
        assert all(lo == 0 or q > split_threshold(lo, k) for q in region)
        assert all(hi == 0 or q <= split_threshold(k, hi) for q in region)

    def hole(variant: str, codebook: int, m: int, n: int, k: int) -> bool:
        return k != 2304

    grid = [512, 2048, 2560, 8192]
    ok = grid_validity(hole, 0, 1, ["X"], [1024, 4096], grid)[:, :, 0]
    assert ok[:, 1].all() and not ok[:, 2].any() and ok[:, 0].all() and ok[:, 3].all()


def b_wins_where_n_2048_meets_k_2048(m: int, n: int, k: int) -> dict[str, float]:
    """B is 8% behind A, but 6% less at N = 2048 and 6% less at K = 2048: ahead only where both meet."""
    base = n * k / 1e6 + 3.0
    return {"A": base, "B": base * (1.08 - 0.06 * (n == 2048) - 0.06 * (k == 2048)), "C": base * 1.02}


def test_tree_answers_the_model_at_a_held_out_crossing_and_nowhere_else(monkeypatch: MonkeyPatch) -> None:
    """Held out at (2048, 2048), the additive model reads B there from its row and column; the answer
    holds at the crossing alone (each effect 1/16 octave wide), a pocket a greedy tree out of depth
    (here depth 2: one leaf, A) merges away, so the emitted tree carries it as a graft of that point."""
    import service.tables.neighbours as neighbours
    from service.tables.neighbours import crossings, graft_crossings

    points = grid_points(b_wins_where_n_2048_meets_k_2048, (1,), NS, KS)
    train, held = held_out(points, (2048, 2048))
    model = fit_neighbours(train, always_valid, methods=("additive",))[0]
    assert (2048, 2048) in crossings(model.kernels[1])
    assert neighbours_answer({0: model})(held[0]) == "B"
    monkeypatch.setattr(neighbours, "TREE_DEPTH", 2)
    tree = neighbours_tree(model)
    assert tree.answer(1, 2048, 2048) == "B"
    away = ((2048, 2560), (3000, 2048), (2048, 1536), (1536, 2048))  # beyond LEVEL_TOL of the crossing
    assert {tree.answer(1, n, k) for n, k in away} <= {"A", "C"}
    grafted = graft_crossings(model, tree)
    assert grafted.root.leaves() == tree.root.leaves()  # nothing left to graft: idempotent


def test_graft_answers_exactly_the_point() -> None:
    from service.tables.neighbours import _graft
    from service.tables.tree import TreeNode

    root = _graft(TreeNode("A", points=4, regret=0.0, best="A"), 2, 1024, 4096, "B")
    assert root.answer(2, 1024, 4096) == "B"
    for m, n, k in itertools.product((1, 2, 3), (1023, 1024, 1025), (3840, 4096, 4352)):
        assert root.answer(m, n, k) == ("B" if (m, n, k) == (2, 1024, 4096) else "A")
