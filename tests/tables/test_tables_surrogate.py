"""The surrogate fallback: a per-variant time model labels a synthetic grid, a regret tree learns it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from service.tables import PointTimes, TableChoice, generate_table
from service.tables.model import MeasuredPoint
from service.tables.policy import fit_policy, held_out_regrets, surrogate_held_out
from service.tables.surrogate import (
    complete_variants,
    fit_models,
    fit_surrogate_trees,
    geometry_for,
    grid_values,
    kbtw_geometry,
    model_answer,
)
from service.tables.tree import FallbackTree, fit_tree
from service.tables.validity import Validity
from tests.tables.conftest import grid_points

A, B, C = "KB1/TW24", "KB4/TW24", "KB16/TW24"
NS = (256, 640, 1536, 4096, 10240)
KS = (512, 1280, 3072, 7168, 16384)


def diagonal(m: int, n: int, k: int) -> dict[str, float]:
    """The best variant follows log2(K/N) smoothly (A for wide, B balanced, C tall): a diagonal
    boundary that axis-aligned cuts between measured shapes cannot place, a smooth model can."""
    x = math.log2(k / n)
    return {v: n * k / 1e6 * (1.0 + 0.04 * (x - mu) ** 2) for v, mu in ((A, -3.0), (B, 0.5), (C, 4.0))}


def points(times=diagonal, ms=(1, 2), ns=NS, ks=KS) -> list[MeasuredPoint]:  # type: ignore[no-untyped-def]
    return grid_points(times, ms, ns, ks)


def regret(p: MeasuredPoint, v: str) -> float:
    assert p.times_us is not None
    return p.times_us[v] / min(p.times_us.values()) - 1


def test_kbtw_geometry_sees_the_extra_wave_of_a_grid_just_past_the_resident_limit() -> None:
    geo = kbtw_geometry(cus=132, wave=32)
    # 5120 x 17408 on the H200: KB8/TW24 launches 400 blocks, 4 past 132 x 3 resident: a second round
    rounds, _ = geo("KB8/TW24", 5120, 17408)
    assert rounds > math.log(1.9)
    assert geo("KB4/TW24", 5120, 17408)[0] == 0.0  # 368 blocks: one round, as the smooth trend says
    assert geometry_for([A, B], "sm_90") is not None
    assert geometry_for(["MX1/KB1/RW1/U4/RG1/PG0/PP1"], "sm_90") is None  # unknown geometry: times alone
    assert geometry_for([A], "host") is None


def test_grow_through_finds_a_pocket_that_one_cut_greedy_growth_misses() -> None:
    def pocket(m: int, n: int, k: int) -> dict[str, float]:  # B only inside the middle of both ranges
        inside = 1024 <= n <= 4096 and 1024 <= k <= 4096
        return {A: 1.0 + (0.5 if inside else 0.0), B: 1.0 + (0.0 if inside else 0.5)}  # no single cut pays

    axis = (256, 512, 1024, 2048, 4096, 8192, 16384)
    grid = points(pocket, (1,), axis, axis)
    greedy = fit_tree(grid, 8, 1)
    through = fit_tree(grid, 8, 1, grow_through=True)
    assert max(regret(p, through.answer(p.m, p.n, p.k)) for p in grid) == 0.0
    assert max(regret(p, greedy.answer(p.m, p.n, p.k)) for p in grid) > 0.0
    assert through.leaves() <= 9  # middle cuts: at most one more level than the 5 leaves a pocket needs
    flat = points(lambda m, n, k: {A: 1.0, B: 1.0 + (0.01 if n * k % 3 else 0.02)}, (1,), axis, axis)
    assert fit_tree(flat, 8, 1, grow_through=True).leaves() == 1  # grown, then pruned: nothing pays


def test_surrogate_generalises_a_diagonal_boundary_the_tree_cannot() -> None:
    pts = points()
    surrogate = surrogate_held_out(pts, pts, None)
    tree = held_out_regrets(pts, "tree")
    assert surrogate is not None and tree is not None
    assert np.mean(surrogate) < 0.25 * np.mean(tree)
    assert max(surrogate) < 0.01


def test_surrogate_trees_answer_unseen_shapes_like_the_model() -> None:
    pts = points()
    models, allowed = fit_models(pts, None), complete_variants(pts)
    trees = fit_surrogate_trees(pts, None)
    answer = model_answer(models, allowed)
    for n, k in ((400, 9000), (2500, 2000), (16000, 700)):
        probe = MeasuredPoint(0, 1, n, k, "probe", A, diagonal(1, n, k))
        assert regret(probe, trees[0].answer(1, n, k) or "") < 0.01
        assert regret(probe, answer(probe) or "") < 0.01
    assert trees[0].answer(3, 1000, 1000) is None  # an M never measured: no answer, like the other policies


def test_grid_spans_the_range_plus_the_margins() -> None:
    values = grid_values([256, 1024], 1.0, 2.0)
    assert values[0] == 128 and values[-1] == 4096 and len(values) == 1 + int((1 + 2 + 2) / 0.25)


def test_policy_chooses_the_surrogate_by_held_out_regret_and_the_table_compiles() -> None:
    pts = points()
    fallback = fit_policy(pts)
    choice = fallback.choices[0]
    assert choice.policy == "surrogate" and 0 in fallback.trees
    assert (
        choice.surrogate_cv is not None
        and choice.tree_cv is not None
        and choice.surrogate_cv < choice.tree_cv
    )
    choices = [TableChoice(p.codebook, ("Q4_0",), p.m, p.n, p.k, p.shape, p.winner, 1.0) for p in pts]
    times = [PointTimes(p.codebook, p.m, p.n, p.k, p.shape, dict(p.times_us or {})) for p in pts]
    table = generate_table(choices, times, "sm_90", ["7"], "llaminar-rocm-decode")  # compiles, replays
    assert table.fallback_policies == {0: "surrogate"}
    assert any("compiles" in c for c in table.checks) and any("replay reproduces" in c for c in table.checks)
    assert "codebook 0: surrogate (held-out mean regret over 25 shapes" in table.text
    assert "surrogate = such a tree learnt from a per-variant time model" in table.text
    assert table.metrics.max_regret is not None and table.metrics.max_regret <= 0.02


def test_rounds_feature_matches_the_geometry_and_the_dialects_evaluate_it() -> None:
    from service.tables.dialects.json_table import _rounds
    from service.tables.tree import RoundsFeature, feature_value

    kb8 = RoundsFeature(8, 24, 132, 8, 3)
    assert RoundsFeature.parse(kb8.name) == kb8
    assert kb8.value(5120) == 2 and kb8.value(5096) == 1 and RoundsFeature(4, 24, 132, 8, 3).value(5120) == 1
    for n in (1, 255, 5097, 5148, 5149, 17408, 248320, 4_000_000):
        assert _rounds(kb8.name, n, 512) == feature_value(kb8.name, 1, n, 512) == kb8.value(n)
    assert kbtw_geometry(132, 32).features([A, "KB8/TW24"]) == [
        RoundsFeature(1, 24, 132, 8, 3).name,
        kb8.name,
    ]


def cliff(m: int, n: int, k: int) -> dict[str, float]:
    """KB8 is 5% faster wherever its grid fits one round; a second round (a few % of N wide windows,
    e.g. 5097..5148) costs it 60%: what only a split on its rounds can follow."""
    geo = kbtw_geometry(132, 32)
    extra = 0.6 if geo("KB8/TW24", n, k)[0] > 0.3 else 0.0
    return {"KB4/TW24": 1.05 * n * k / 1e6, "KB8/TW24": (1.0 + extra) * n * k / 1e6}


def test_surrogate_tree_splits_on_rounds_and_the_tables_replay_it() -> None:
    ns = (3000, 4096, 5000, 5120, 6144, 8192, 10240, 10300)
    pts = points(cliff, (1,), ns, (4096, 8192, 16384))
    trees = fit_surrogate_trees(pts, kbtw_geometry(132, 32))
    assert any(f.startswith("rounds_") for f in trees[0].root.features())
    for n in (5120, 5140, 10240, 10290):  # second-round windows of KB8 the grid did not all hold
        probe = MeasuredPoint(0, 1, n, 12000, "probe", "KB4/TW24", cliff(1, n, 12000))
        assert regret(probe, trees[0].answer(1, n, 12000) or "") == 0.0
    choices = [TableChoice(p.codebook, ("Q4_0",), p.m, p.n, p.k, p.shape, p.winner, 1.0) for p in pts]
    times = [PointTimes(p.codebook, p.m, p.n, p.k, p.shape, dict(p.times_us or {})) for p in pts]
    for dialect in ("llaminar-rocm-decode", "json"):
        table = generate_table(choices, times, "sm_90", ["7"], dialect, policies=("surrogate",))
        assert any("replay reproduces" in c for c in table.checks), table.checks
        assert "rounds_kb8_tw24_cu132_r8_b3" in table.text or "KbTwRounds(n, 8, 24" in table.text


def test_rounds_rises_are_exactly_where_a_variant_launches_one_more_round() -> None:
    from service.tables.surrogate import rounds_rises
    from service.tables.tree import RoundsFeature

    geo = kbtw_geometry(132, 32)
    rises = rounds_rises(geo, ["KB1/TW24", "KB8/TW24"], 256, 20000)
    kb8 = RoundsFeature(8, 24, 132, 8, 3)
    assert rises == [n for n in range(256, 20001) if kb8.value(n) > kb8.value(n - 1)]
    assert 5097 in rises and 5096 not in rises  # 5097..5148: KB8/TW24's second round (400 > 396 blocks)
    assert rounds_rises(geo, ["KB1/TW24", "KB4/TW24"], 256, 20000) == []  # never more than one round


def test_surrogate_grid_labels_every_rounds_rise_and_the_tree_leaves_those_windows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Measured in one KB8 window (5120) only. KB8 wins everywhere outside its windows, so the labelled
    grid must hold every N at which KB8's rounds rise (windows 1-2% of N wide, narrower than the grid's
    1/16-octave step: on the H200 sweep a region where none was sampled cost 53-61% held out), and the
    tree must answer KB4 in each window."""
    from service.tables import surrogate

    labelled: dict[int, set[int]] = {}
    grid_tree = surrogate._grid_tree

    def spy(
        cb: int, blocks: list[surrogate.GridBlock], extra: Sequence[str], *valid: Validity
    ) -> FallbackTree:
        labelled[cb] = {int(n) for b in blocks for n in b[1]}
        return grid_tree(cb, blocks, extra, *valid)

    monkeypatch.setattr(surrogate, "_grid_tree", spy)
    ns = (3000, 4096, 5120, 6144, 8192, 12288)
    pts = points(cliff, (1,), ns, (4096, 16384))
    tree = fit_surrogate_trees(pts, kbtw_geometry(132, 32))[0]
    windows = surrogate.rounds_rises(kbtw_geometry(132, 32), ["KB8/TW24"], 3000, 12000)
    assert len(windows) >= 15 and set(windows) <= labelled[0]
    for n in windows:
        probe = MeasuredPoint(0, 1, n, 8192, "probe", "KB4/TW24", cliff(1, n, 8192))
        assert regret(probe, tree.answer(1, n, 8192) or "") == 0.0, n
    probe = MeasuredPoint(0, 1, 7000, 8192, "probe", "KB8/TW24", cliff(1, 7000, 8192))
    assert tree.answer(1, 7000, 8192) == "KB8/TW24" and regret(probe, "KB8/TW24") == 0.0  # one round: KB8
