"""The decision-tree fallback: regret-fitted over log2 M/N/K, chosen per codebook by held-out regret."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from service.tables import PointTimes, TableChoice, generate_table
from service.tables.model import MeasuredPoint
from service.tables.policy import fit_policy, held_out_regrets
from service.tables.tree import fit_tree, split_threshold
from tests.tables.conftest import grid_points

A, B, C = "KB1/TW4", "KB8/TW8", "KB2/TW12"
NS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
KS = (512, 1024, 2048, 4096, 8192)


def by_k(m: int, n: int, k: int) -> dict[str, float]:
    """Short rows want A, long rows B (split-K pays off), whatever N: a K regime, not a work-size one."""
    base = n * k / 1e6
    if k <= 2048:
        return {A: base, B: base * 1.25, C: base * 1.1}
    return {A: base * 1.3, B: base, C: base * 1.1}


def points(times=by_k, ms=(1, 2)) -> list[MeasuredPoint]:  # type: ignore[no-untyped-def]
    return grid_points(times, ms, NS, KS, codebook=19)


def test_split_threshold_is_the_log2_midpoint_in_integers() -> None:
    for a, b in ((1, 2), (2, 3), (512, 1024), (1000, 1001), (5120, 17408)):
        t = split_threshold(a, b)
        assert a <= t < b
        assert (math.log2(t) <= (math.log2(a) + math.log2(b)) / 2) and (
            math.log2(t + 1) > (math.log2(a) + math.log2(b)) / 2
        )


def test_tree_finds_the_k_regime_and_generalises() -> None:
    pts = points()
    tree = fit_tree(pts, max_depth=3, min_leaf=1)
    assert tree.feature == "k" and tree.threshold in range(2048, 4096)
    assert tree.leaves() == 2 and {tree.answer(1, 3000, 1000), tree.answer(2, 100000, 9000)} == {A, B}
    held = held_out_regrets(pts, "tree")
    assert held is not None and max(held) == 0.0  # every held-out shape answered right


def test_policy_takes_the_tree_where_it_generalises_better_and_records_why() -> None:
    pts = points()
    fallback = fit_policy(pts)
    choice = fallback.choices[19]
    assert choice.policy == "tree" and 19 in fallback.trees and not fallback.rules
    assert choice.tree_cv == 0.0 and choice.segments_cv is not None and choice.segments_cv > 0.0
    seg_only = fit_policy(pts, ("segments",))
    assert seg_only.choices[19].policy == "segments" and not seg_only.trees


def test_policy_keeps_segments_when_the_tree_is_no_better() -> None:
    same = points(lambda m, n, k: {A: n * k / 1e6, B: n * k / 1e6 * 1.2})  # A everywhere
    fallback = fit_policy(same)
    assert fallback.choices[19].policy == "segments"  # tie on held-out regret: the Llaminar shape stays


@pytest.mark.parametrize("dialect", ["llaminar-rocm-decode", "json"])
def test_tree_table_compiles_replays_and_says_so_in_the_header(dialect: str) -> None:
    pts = points()
    choices = [TableChoice(p.codebook, ("Q8_0",), p.m, p.n, p.k, p.shape, p.winner, 1.0) for p in pts]
    times = [PointTimes(p.codebook, p.m, p.n, p.k, p.shape, dict(p.times_us or {})) for p in pts]
    table = generate_table(choices, times, "sm_90", ["7"], dialect)  # validation replays every point + probes
    assert table.fallback_policies == {19: "tree"}
    assert table.metrics.entries == 0 and table.metrics.max_regret == 0.0  # the tree alone is exact
    assert any("replay reproduces" in c for c in table.checks)
    assert "codebook 19: tree (held-out mean regret over 35 shapes" in table.text
    if dialect != "json":
        assert "if (k <= " in table.text and "decision tree over log2 M, N, K" in table.text


def test_k_mod_feature_reads_alike_in_python_cpp_and_json(cxx: str, tmp_path: Path) -> None:
    """A KModFeature split (K % q up to a top, q beyond it) is the same integer in the tree, in the
    C++ a table compiles and in a json consumer's reading of its documented name."""
    from service.tables.dialects.cpp_common import feature_expr
    from service.tables.dialects.json_table import _rounds
    from service.tables.tree import KModFeature, feature_value

    feature = KModFeature(1024, 17408)
    assert KModFeature.parse(feature.name) == feature
    ks = [256, 1024, 1280, 7168, 7424, 17408, 18432, 65536]
    want = [feature_value(feature.name, 1, 4096, k) for k in ks]
    assert want == [256, 0, 256, 0, 256, 0, 1024, 1024]
    assert [_rounds(feature.name, 4096, k) for k in ks] == want
    body = "\n".join(
        f'    {{ const int k = {k}; std::printf("%d\\n", {feature_expr(feature.name, "m", "")}); }}'
        for k in ks
    )
    (tmp_path / "f.cpp").write_text(f"#include <cstdio>\nint main() {{\n{body}\n    return 0;\n}}\n")
    subprocess.run(
        [cxx, "-std=c++17", str(tmp_path / "f.cpp"), "-o", str(tmp_path / "f")], check=True, timeout=120
    )
    out = subprocess.run([str(tmp_path / "f")], check=True, capture_output=True, text=True, timeout=30)
    assert [int(x) for x in out.stdout.split()] == want


def test_tree_splits_on_k_mod_where_a_variant_runs_at_every_fourth_k() -> None:
    """D wins at K % 1024 == 0 only: with the feature one split separates it, where cuts on K alone
    need two per such K."""
    from service.tables.tree import KModFeature, fit_tree_matrix

    ks = list(range(1024, 8192 + 1, 256))
    base = np.array([[1, 4096, k] for k in ks], dtype=np.int64)
    matrix = np.array([[0.0, 0.1] if k % 1024 == 0 else [0.1, 0.0] for k in ks])
    root = fit_tree_matrix(matrix, ["D", "E"], base, {}, 2, 1, extra_features=[KModFeature(1024, 8192).name])
    assert root.feature == KModFeature(1024, 8192).name and root.leaves() == 2
    assert fit_tree_matrix(matrix, ["D", "E"], base, {}, 2, 1).leaves() < len(ks)  # depth 2 cannot
