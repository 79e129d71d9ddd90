"""The racing policy drops clearly slower variants, keeps ties, and runs inside the real scheduler."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.statistics.synthetic import lognormal_times
from workers.backends.base import TaskSpec
from workers.harness.interleave import DispatchFn, interleave
from workers.harness.racing import RacingPolicy, policy_for


def _fn(times: tuple[float, ...]) -> DispatchFn:
    """A dispatch that returns the next recorded time (ns) for its variant."""
    it = iter(times)
    return lambda _buffer: int(next(it) * 1000)


def _synthetic(medians: dict[str, float], cv: float, n: int, seed: int) -> list[tuple[str, DispatchFn]]:
    rng = np.random.default_rng(seed)
    return [(name, _fn(lognormal_times(rng, median, cv, n))) for name, median in medians.items()]


def test_race_drops_clearly_slower_variants_and_keeps_ties() -> None:
    medians = {"KB1/TW4": 10.0, "KB1/TW8": 10.0, "KB2/TW4": 13.0, "KB8/TW8": 15.0}
    policy = RacingPolicy(min_dispatches=20, max_dispatches=200, seed=1)
    result = interleave(_synthetic(medians, 0.03, 200, seed=11), rounds=200, warmup=0, policy=policy)
    counts = {name: len(rows) for name, rows in result.dispatches.items()}
    assert counts["KB2/TW4"] == 20 and counts["KB8/TW8"] == 20  # dropped at the first check
    assert set(policy.dropped) == {"KB2/TW4", "KB8/TW8"}
    assert counts["KB1/TW4"] == counts["KB1/TW8"] > 20  # the tie keeps racing
    assert policy.stop_reason in ("max_dispatches", "tie (equivalent within min_effect)")
    seqs = sorted(d.seq for rows in result.dispatches.values() for d in rows)
    assert seqs == list(range(sum(counts.values())))  # still interleaved and numbered in order


def test_race_stops_when_decided() -> None:
    policy = RacingPolicy(min_dispatches=10, max_dispatches=500, seed=2)
    result = interleave(_synthetic({"A": 10.0, "B": 10.6}, 0.02, 500, seed=5), rounds=500, policy=policy)
    assert policy.stop_reason == "decided"
    assert 10 <= len(result.dispatches["A"]) < 500  # far fewer than the exhaustive budget
    assert policy.dropped == {"B": len(result.dispatches["B"])}


def test_parity_failures_cannot_lead_the_race() -> None:
    medians = {"BROKEN": 5.0, "A": 10.0, "B": 12.0}
    policy = RacingPolicy(min_dispatches=10, max_dispatches=100, eligible=frozenset({"A", "B"}), seed=3)
    result = interleave(_synthetic(medians, 0.02, 100, seed=6), rounds=100, policy=policy)
    assert len(result.dispatches["BROKEN"]) == 10  # timed for visibility, then dropped
    assert "A" not in policy.dropped and "B" in policy.dropped and policy.stop_reason == "decided"


def test_policy_for_follows_the_strategy() -> None:
    spec = TaskSpec("host", "decode", "Q8_0", "S", 64, 64, 1, ("KB1/TW4",), 5, 50, strategy="exhaustive")
    assert policy_for(spec) is None
    race = policy_for(TaskSpec(**{**spec.__dict__, "strategy": "race"}), eligible=["KB1/TW4"])
    assert race is not None and (race.min_dispatches, race.max_dispatches) == (5, 50)
    assert race.eligible == frozenset({"KB1/TW4"})


def test_host_backend_races_real_kernels(artifact_dir: Path) -> None:
    from workers.backends.host import HostBackend

    backend = HostBackend(artifact_dir=artifact_dir)
    if backend.detect() is None:
        pytest.skip("no C compiler")
    variants = ("KB1/TW4", "KB2/TW4", "KB4/TW8", "KB8/TW8")
    spec = TaskSpec("host", "decode", "Q8_0", "S", 256, 256, 1, variants, 6, 60, warmup=1, strategy="race")
    result = backend.run_task(spec)
    counts = [len(r.dispatches) for r in result.results]
    assert all(r.parity is not None and r.parity.passed for r in result.results)
    assert min(counts) >= 6 and max(counts) <= 60
    seqs = sorted(d.seq for r in result.results for d in r.dispatches)
    assert seqs == list(range(sum(counts)))
