"""bench/table_regret.py's leave-one-shape-out must not see the held-out shape: its answers there may not
depend on that shape's own measurements."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from service.tables.model import MeasuredPoint
from service.tables.surrogate import kbtw_geometry
from tests.tables.conftest import grid_points

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import table_regret  # noqa: E402

VARIANTS = ("KB1/TW24", "KB4/TW24", "KB8/TW24", "KB16/TW24")
NS = (1024, 3000, 5120, 8192, 12288)
KS = (2048, 8192)
HELD = [(5120, 8192), (3000, 2048)]


def times(m: int, n: int, k: int) -> dict[str, float]:
    """KB/TW-like times: split-K pays off as K/N grows; KB8 loses 60% in its second-round windows."""
    geo = kbtw_geometry(132, 32)
    out = {}
    for v in VARIANTS:
        kb = int(v.split("/")[0][2:])
        extra = 0.6 if geo(v, n, k)[0] > 0.3 else 0.0
        out[v] = n * k / 1e6 * (1.0 + 0.05 * abs(kb - 4 * k / n)) * (1.0 + extra) * (1 + 0.1 * m)
    return out


def measured() -> list[MeasuredPoint]:
    return grid_points(times, (1, 2), NS, KS)


def perturbed(points: Sequence[MeasuredPoint], shape: tuple[int, int]) -> list[MeasuredPoint]:
    """The held-out shape's slowest variant made 100x faster than its best: a different winner there."""
    out = []
    for p in points:
        if (p.n, p.k) == shape and p.times_us:
            t = dict(p.times_us)
            slow = max(t, key=t.__getitem__)
            t[slow] = min(t.values()) / 100
            p = dataclasses.replace(p, winner=slow, times_us=t)
        out.append(p)
    return out


Answers = dict[tuple[str, int, int, int], str | None]  # (policy, M, N, K) -> variant


def answers(points: Sequence[MeasuredPoint], policies: dict[str, table_regret.Answerer]) -> Answers:
    geometry = kbtw_geometry(132, 32)
    return {
        (name, p.m, p.n, p.k): variant
        for _, name, p, variant in table_regret.held_out_answers(points, geometry, policies, HELD)
    }


def nearest(points: Sequence[MeasuredPoint]) -> Callable[[MeasuredPoint], str | None]:
    def answer(q: MeasuredPoint) -> str | None:
        same = [p for p in points if p.m == q.m]
        return min(same, key=lambda p: (abs(p.n - q.n) + abs(p.k - q.k), p.n, p.k)).winner

    return answer


def test_held_out_answers_never_depend_on_the_held_out_shapes_times() -> None:
    base = measured()
    before = answers(base, table_regret.POLICIES)
    assert {name for name, *_ in before} == set(table_regret.POLICIES)
    for shape in HELD:
        after = answers(perturbed(base, shape), table_regret.POLICIES)
        at_shape = [key for key in before if key[2:] == shape]  # other held-out shapes train on it
        assert len(at_shape) == 2 * len(table_regret.POLICIES)
        changed = {key: (before[key], after[key]) for key in at_shape if before[key] != after[key]}
        assert not changed, f"held-out {shape}: answers moved with its own times: {changed}"


def test_the_check_sees_a_policy_that_does_look_at_the_held_out_shape() -> None:
    """Negative control: a nearest-neighbour answer fitted on the Fits' training points passes; the same
    answer over every point (the held-out shape included) moves with the perturbation."""
    base = measured()
    for shape in HELD:
        moved = perturbed(base, shape)
        honest = {"nearest": lambda fits: nearest(fits.points)}

        def at(found: Answers) -> Answers:
            return {key: v for key, v in found.items() if key[2:] == shape}  # noqa: B023

        assert at(answers(base, honest)) == at(answers(moved, honest))
        leak_base = answers(base, {"nearest": lambda fits: nearest(base)})
        leak_moved = answers(moved, {"nearest": lambda fits: nearest(moved)})  # noqa: B023
        assert at(leak_base) != at(leak_moved)


def test_regret_beyond_noise_is_the_low_end_of_the_ratio_interval() -> None:
    rng = np.random.default_rng(7)
    best = (1000 * (1 + 0.01 * rng.standard_normal(50))).astype(int).tolist()
    same = (1000 * (1 + 0.01 * rng.standard_normal(50))).astype(int).tolist()  # the same distribution
    slower = [int(t * 1.10) for t in best[::-1]]  # 10% slower, the same noise
    times = {"B": best, "S": same, "L": slower}
    assert table_regret.beyond_noise(times, "B", "B", 1) == 0.0
    inside = table_regret.beyond_noise(times, "S", "B", 1)
    assert inside is not None and inside < 0.005  # a gap inside the noise: (nearly) none
    low = table_regret.beyond_noise(times, "L", "B", 1)
    assert low is not None and 0.08 < low < 0.10  # the 10% gap, less the noise
    assert table_regret.beyond_noise(times, "X", "B", 1) is None  # no dispatches: nothing to say


def test_loso_reports_regret_beyond_noise_beside_the_raw_figures() -> None:
    points = measured()
    dispatches = {
        p.point: {v: [int(1000 * t)] * 20 for v, t in (p.times_us or {}).items()} for p in points
    }  # no noise at all: beyond-noise regret equals the raw regret
    out = table_regret.loso(points, kbtw_geometry(132, 32), HELD, dispatches=dispatches)
    for name in ("tree", "neighbours", "chosen"):
        raw = out["policies"][name]["all_points_uncovered_charged_100pct"]
        beyond = out["policies"][name]["beyond_noise_uncovered_charged_100pct"]
        assert beyond["points"] == out["points"]
        assert abs(beyond["mean"] - raw["mean"]) < 2e-3  # medians of integer-ns copies: rounding only


def test_loso_reports_only_the_policies_asked_for() -> None:
    wanted = {name: table_regret.POLICIES[name] for name in ("tree", "chosen")}
    out = table_regret.loso(measured(), kbtw_geometry(132, 32), HELD[:1], policies=wanted)
    assert set(out["policies"]) == {"tree", "chosen"}
    assert out["subset"] is not None and out["targets"]["chosen_meets"] is False  # a subset claims nothing


def test_worker_jobs_give_the_same_answers_in_the_same_order() -> None:
    """--jobs: held-out shapes fitted in worker processes answer exactly as one process does (workers
    start from a forkserver: a fork of this test process, which holds live Redis connections and Celery's
    after-fork hooks from earlier tests, once hung in a read of an inherited socket)."""
    base = measured()
    geometry = kbtw_geometry(132, 32)
    policies = {name: table_regret.POLICIES[name] for name in ("segments", "neighbours", "chosen")}
    one = list(table_regret.held_out_answers(base, geometry, policies, HELD))
    two = list(table_regret.held_out_answers(base, geometry, policies, HELD, jobs=2))
    assert one == two and len(one) == len(policies) * sum((p.n, p.k) in HELD for p in base)


def test_worker_jobs_take_named_policies_only() -> None:
    """A worker looks a policy up by name: a function not in POLICIES is refused, not silently replaced."""
    base = measured()
    custom = {"segments": lambda fits: lambda p: None}
    with pytest.raises(ValueError, match="POLICIES only"):
        list(table_regret.held_out_answers(base, None, custom, HELD, jobs=2))
