"""The racing policy drops clearly slower variants, keeps ties, and runs inside the real scheduler."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from tests.statistics.synthetic import lognormal_times
from workers.backends.base import TaskSpec
from workers.harness.interleave import DispatchFn, interleave
from workers.harness.racing import RacingPolicy, look_z, planned_looks, policy_for


def _fn(times: tuple[float, ...]) -> DispatchFn:
    """A dispatch that returns the next recorded time (ns) for its variant."""
    it = iter(times)
    return lambda _buffer: int(next(it) * 1000)


def _synthetic(medians: dict[str, float], cv: float, n: int, seed: int) -> list[tuple[str, DispatchFn]]:
    rng = np.random.default_rng(seed)
    return [(name, _fn(lognormal_times(rng, median, cv, n))) for name, median in medians.items()]


def test_race_drops_clearly_slower_variants_and_keeps_ties() -> None:
    medians = {
        "MX4/KB1/RW1/U4/RG1/PG0/PP0": 10.0,
        "MX4/KB1/RW2/U2/RG1/PG0/PP0": 10.0,
        "MX4/KB1/RW2/U4/RG1/PG0/PP0": 13.0,
        "MX4/KB4/RW2/U4/RG1/PG0/PP0": 15.0,
    }
    policy = RacingPolicy(min_dispatches=20, max_dispatches=200, seed=1)
    result = interleave(_synthetic(medians, 0.03, 200, seed=11), rounds=200, warmup=0, policy=policy)
    counts = {name: len(rows) for name, rows in result.dispatches.items()}
    assert (
        counts["MX4/KB1/RW2/U4/RG1/PG0/PP0"] == 20 and counts["MX4/KB4/RW2/U4/RG1/PG0/PP0"] == 20
    )  # dropped at the first check
    assert set(policy.dropped) == {"MX4/KB1/RW2/U4/RG1/PG0/PP0", "MX4/KB4/RW2/U4/RG1/PG0/PP0"}
    assert (
        counts["MX4/KB1/RW1/U4/RG1/PG0/PP0"] == counts["MX4/KB1/RW2/U2/RG1/PG0/PP0"] > 20
    )  # the tie keeps racing
    assert policy.stop_reason in ("max_dispatches", "equivalent")
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
    spec = TaskSpec(
        "host",
        "decode",
        "Q8_0",
        "S",
        64,
        64,
        1,
        ("MX4/KB1/RW1/U4/RG1/PG0/PP0",),
        5,
        50,
        strategy="exhaustive",
    )
    assert policy_for(spec) is None
    race = policy_for(
        TaskSpec(**{**spec.__dict__, "strategy": "race"}), eligible=["MX4/KB1/RW1/U4/RG1/PG0/PP0"]
    )
    assert race is not None and (race.min_dispatches, race.max_dispatches) == (5, 50)
    assert race.eligible == frozenset({"MX4/KB1/RW1/U4/RG1/PG0/PP0"})


def test_host_backend_races_real_kernels(artifact_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend hands the task's racing policy to the interleaver and honours where it stopped."""
    import workers.harness.interleave as interleave_module
    from workers.backends.host import HostBackend

    backend = HostBackend(artifact_dir=artifact_dir)
    if backend.detect() is None:
        pytest.skip("no C compiler")
    created: list[RacingPolicy | None] = []
    real_policy_for = interleave_module.policy_for

    def recording_policy_for(spec: TaskSpec, eligible: object = None) -> RacingPolicy | None:
        policy = real_policy_for(spec, eligible=eligible)  # type: ignore[arg-type]
        created.append(policy)
        return policy

    monkeypatch.setattr(interleave_module, "policy_for", recording_policy_for)
    variants = (
        "MX4/KB1/RW1/U4/RG1/PG0/PP0",
        "MX4/KB1/RW2/U4/RG1/PG0/PP0",
        "MX4/KB4/RW2/U2/RG1/PG0/PP0",
        "MX4/KB4/RW2/U4/RG1/PG0/PP0",
    )
    spec = TaskSpec("host", "decode", "Q8_0", "S", 256, 256, 1, variants, 6, 60, warmup=1, strategy="race")
    result = backend.run_task(spec)
    counts = {r.variant: len(r.dispatches) for r in result.results}
    assert all(r.parity is not None and r.parity.passed for r in result.results)
    (policy,) = created
    assert isinstance(policy, RacingPolicy) and policy.eligible == frozenset(variants)
    assert policy.stop_reason in ("decided", "equivalent", "max_dispatches")
    # every variant ran at least min_dispatches; the survivors ran exactly until the race stopped
    assert min(counts.values()) >= 6 and max(counts.values()) == policy.stopped_at <= 60
    seqs = sorted(d.seq for r in result.results for d in r.dispatches)
    assert seqs == list(range(sum(counts.values())))

    exhaustive_spec = TaskSpec("host", "decode", "Q8_0", "S", 256, 256, 1, variants, 6, 60, warmup=1)
    exhaustive = backend.run_task(exhaustive_spec)
    assert [len(r.dispatches) for r in exhaustive.results] == [6, 6, 6, 6]
    assert created[-1] is None  # exhaustive: no policy


TRIALS = 20


def _race(medians: dict[str, float], cv: float, budget: int, seed: int, **kw: object) -> RacingPolicy:
    policy = RacingPolicy(min_dispatches=20, max_dispatches=budget, seed=seed, **kw)  # type: ignore[arg-type]
    interleave(_synthetic(medians, cv, budget, seed=1000 + seed), rounds=budget, policy=policy)
    return policy


def test_looks_are_planned_geometrically_and_corrected_for_their_number() -> None:
    looks = planned_looks(20, 200, 1.25)
    assert looks[:4] == (20, 25, 32, 40) and looks[-1] < 200
    assert all(b > a for a, b in itertools.pairwise(looks))
    assert planned_looks(20, 20, 1.25) == ()  # min == max: nothing to look at before the budget ends
    # Bonferroni over the looks: one look is the plain 95% interval, more looks widen each one.
    assert look_z(0.95, 1) == pytest.approx(1.95996, abs=1e-4)
    assert look_z(0.95, len(looks)) > look_z(0.95, 4) > look_z(0.95, 1)
    policy = RacingPolicy(20, 200)
    assert policy.looks == looks and policy.z == pytest.approx(look_z(0.95, len(looks)))
    with pytest.raises(ValueError):
        planned_looks(20, 200, 1.0)


def test_equivalence_stop_never_fires_on_a_true_3_percent_gap() -> None:
    """3% > the 2% equivalence width: the race must keep going until the gap is shown, not call a tie."""
    decided = 0
    for trial in range(TRIALS):
        policy = _race({"A": 100.0, "B": 103.0}, cv=0.05, budget=400, seed=trial)
        assert policy.stop_reason != "equivalent", trial
        assert "A" not in policy.dropped  # the faster variant is never the one dropped
        if policy.stop_reason == "decided":
            decided += 1
    # Power: lower bound of the corrected interval clears 1% once ~170 rounds are in (SE ~ 0.088/sqrt(n)).
    assert decided / TRIALS >= 0.9


def test_race_stops_on_a_true_tie_well_before_the_budget() -> None:
    for trial in range(TRIALS):
        policy = _race({"A": 100.0, "B": 100.0, "C": 100.0}, cv=0.02, budget=400, seed=trial)
        assert not policy.dropped, (trial, policy.dropped)  # nothing is shown slower on a tie
        assert policy.stop_reason == "equivalent", (trial, policy.stop_reason)
        assert sorted(policy.survivors) == ["A", "B", "C"]  # the tie group, for the tie-break
        # |log ratio| + z * SE < 2% with SE ~ 0.035/sqrt(n), z ~ 2.9: about 60-100 rounds, not 400.
        assert policy.stopped_at <= 200, (trial, policy.stopped_at)


def test_repeated_looks_keep_false_drops_at_the_family_wise_level() -> None:
    """On an 4-way tie at high noise (never equivalent within 2%), almost nothing may be dropped."""
    comparisons = dropped = 0
    for trial in range(TRIALS):
        policy = _race({"A": 100.0, "B": 100.0, "C": 100.0, "D": 100.0}, cv=0.15, budget=200, seed=trial)
        comparisons += 3
        dropped += len(policy.dropped)
        assert policy.stop_reason in ("max_dispatches", "equivalent")
    assert dropped / comparisons <= 0.05, dropped
