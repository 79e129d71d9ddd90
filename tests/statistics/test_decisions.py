"""choose_winner against synthetic distributions of known truth (many seeded trials each)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from service.statistics.winners import Candidate, choose_winner
from tests.statistics.synthetic import lognormal_times

TRIALS = 40
RESAMPLES = 1000


def _candidates(rng: np.random.Generator, medians: dict[str, float], cv: float, n: int) -> list[Candidate]:
    out = []
    for order, (name, median) in enumerate(medians.items()):
        times = lognormal_times(rng, median, cv, n)
        out.append(Candidate(name, float(np.median(times)), True, order + 1, order, times))
    return out


# (cv, true effect of the runner-up, dispatches per variant, required rate of correct decided winners).
# The rate is set from the power of the rule: the standard error of a ratio of medians is about
# 1.25 * cv * sqrt(2 / n); "decided" needs the lower bound of the 95% interval above 1 + 1% effect.
POWERED = [
    (0.02, 0.05, 50, 0.95),  # gap - effect ~ 8 standard errors
    (0.05, 0.10, 100, 0.95),  # ~10 SE
    (0.10, 0.10, 200, 0.95),  # ~7 SE
    (0.05, 0.03, 200, 0.75),  # ~3.2 SE: power ~ 0.9
]


@pytest.mark.parametrize(("cv", "effect", "n", "required"), POWERED)
def test_decides_the_true_winner_at_known_noise(cv: float, effect: float, n: int, required: float) -> None:
    rng = np.random.default_rng(1234)
    correct = wrong = 0
    for trial in range(TRIALS):
        medians = {"KB1/TW4": 100.0 * (1 + effect), "KB2/TW4": 100.0, "KB4/TW4": 130.0}
        decision = choose_winner(_candidates(rng, medians, cv, n), seed=f"trial{trial}", resamples=RESAMPLES)
        assert decision is not None
        if decision.decided and decision.winner.variant == "KB2/TW4":
            correct += 1
        elif decision.decided:
            wrong += 1
    assert correct / TRIALS >= required, (cv, effect, n, correct)
    assert wrong == 0  # a confident wrong winner is the one outcome that must not happen


@pytest.mark.parametrize("cv", [0.02, 0.05, 0.10])
def test_true_tie_forms_a_tie_group(cv: float) -> None:
    rng = np.random.default_rng(99)
    tied = 0
    for trial in range(TRIALS):
        medians = {"KB1/TW4": 100.0, "KB1/TW8": 100.0, "KB8/TW8": 125.0}
        decision = choose_winner(_candidates(rng, medians, cv, 100), seed=trial, resamples=RESAMPLES)
        assert decision is not None
        assert "KB8/TW8" not in decision.tie_group  # 25% slower is never a tie at these noise levels
        if not decision.decided and set(decision.tie_group) == {"KB1/TW4", "KB1/TW8"}:
            tied += 1
            assert decision.winner.variant == "KB1/TW4"  # no incumbent: the simpler variant
            assert decision.reason == "tie:simplest"
            assert decision.margin_ci is not None and decision.margin_ci[0] <= 0.01
    assert tied / TRIALS >= 0.95


def test_incumbent_prevents_flips_on_noise() -> None:
    rng = np.random.default_rng(7)
    leaders: set[str] = set()
    kept = 0
    for trial in range(TRIALS):
        medians = {"KB1/TW4": 50.0, "KB4/TW8": 50.0}  # identical truth; KB4/TW8 is the incumbent
        decision = choose_winner(
            _candidates(rng, medians, 0.05, 60), incumbent="KB4/TW8", seed=trial, resamples=RESAMPLES
        )
        assert decision is not None
        leaders.add(decision.leader)
        if decision.winner.variant == "KB4/TW8":
            kept += 1
    assert leaders == {"KB1/TW4", "KB4/TW8"}  # lowest median alone would have flipped the table
    assert kept / TRIALS >= 0.95


def test_incumbent_does_not_override_a_real_gap() -> None:
    rng = np.random.default_rng(8)
    decision = choose_winner(
        _candidates(rng, {"KB1/TW4": 50.0, "KB4/TW8": 55.0}, 0.02, 60), incumbent="KB4/TW8", seed=1
    )
    assert decision is not None
    assert decision.decided and decision.winner.variant == "KB1/TW4" and decision.reason == "decided"
    assert decision.margin is not None and decision.margin_ci is not None
    assert decision.margin_ci[0] > 0.01 and decision.margin_ci[0] <= decision.margin <= decision.margin_ci[1]
    assert decision.tie_group == []


def test_seeded_bootstrap_is_deterministic_across_processes() -> None:
    code = (
        "import numpy as np\n"
        "from service.statistics.winners import Candidate, choose_winner\n"
        "from tests.statistics.synthetic import lognormal_times\n"
        "rng = np.random.default_rng(5)\n"
        "c = [Candidate(v, 0.0, True, i, i, lognormal_times(rng, m, 0.05, 40))\n"
        "     for i, (v, m) in enumerate([('KB1/TW4', 10.0), ('KB2/TW4', 10.3)])]\n"
        "d = choose_winner(c, seed='host/decode/Q8_0/1/512/256')\n"
        "print(repr((d.winner.variant, d.margin, d.margin_ci, [s.median_ci for s in d.stats])))\n"
    )
    outputs = set()
    for hash_seed in ("0", "12345"):
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={"PYTHONHASHSEED": hash_seed, "PATH": "/usr/bin:/bin"},
            cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]),
        )
        outputs.add(proc.stdout)
    assert len(outputs) == 1 and "KB1/TW4" in outputs.pop()
    rng = np.random.default_rng(5)
    cands = _candidates(rng, {"KB1/TW4": 10.0, "KB2/TW4": 10.3}, 0.05, 40)
    first, again = choose_winner(cands, seed="p"), choose_winner(list(reversed(cands)), seed="p")
    other = choose_winner(cands, seed="q")
    assert first is not None and again is not None and other is not None
    assert first.margin_ci == again.margin_ci  # order of candidates does not matter
    assert first.margin_ci != other.margin_ci  # the seed does


def test_parity_failures_and_stale_results_never_win() -> None:
    rng = np.random.default_rng(3)
    fast = lognormal_times(rng, 10.0, 0.01, 30)
    slow = lognormal_times(rng, 20.0, 0.01, 30)
    candidates = [
        Candidate("KB1/TW4", 10.0, False, 1, 0, fast),
        Candidate("KB2/TW4", 10.0, True, 2, 1, fast, stale=True),
        Candidate("KB4/TW4", 20.0, True, 3, 2, slow),
    ]
    decision = choose_winner(candidates, seed=1)
    assert decision is not None and decision.winner.variant == "KB4/TW4" and decision.runner_up is None
    assert {s.variant: s.eligible for s in decision.stats} == {
        "KB1/TW4": False,
        "KB2/TW4": False,
        "KB4/TW4": True,
    }
    assert next(s for s in decision.stats if s.variant == "KB2/TW4").stale
    assert choose_winner(candidates[:2]) is None


def test_summaries_without_dispatches_decide_only_on_large_gaps() -> None:
    near = [Candidate("KB1/TW4", 10.0, True, 1, 0), Candidate("KB2/TW4", 10.5, True, 2, 1)]
    far = [Candidate("KB1/TW4", 10.0, True, 1, 0), Candidate("KB2/TW4", 12.0, True, 2, 1)]
    near_d, far_d = choose_winner(near), choose_winner(far)
    assert near_d is not None and far_d is not None
    assert not near_d.decided and near_d.tie_group == ["KB1/TW4", "KB2/TW4"] and near_d.margin_ci is None
    assert far_d.decided and far_d.winner.variant == "KB1/TW4"
    assert far_d.margin == pytest.approx(0.2) and far_d.margin_ci is None


def test_raced_out_variants_never_rejoin_the_tie_group() -> None:
    """A race dropped KB1/TW4 after 20 dispatches; its wide interval must not hand it the tie-break."""
    rng = np.random.default_rng(21)
    early = lognormal_times(rng, 10.6, 0.10, 20)
    long_a = lognormal_times(rng, 10.0, 0.02, 200)
    long_b = lognormal_times(rng, 10.05, 0.02, 200)
    candidates = [
        Candidate("KB1/TW4", float(np.median(early)), True, 1, 0, early),
        Candidate("KB2/TW8", float(np.median(long_a)), True, 2, 3, long_a),
        Candidate("KB4/TW8", float(np.median(long_b)), True, 3, 5, long_b),
    ]
    plain = choose_winner(candidates, seed=4)
    assert plain is not None and "KB1/TW4" in plain.tie_group  # 20 noisy dispatches: indistinguishable
    assert plain.winner.variant == "KB1/TW4"  # ...and the simplest, so it would win the tie-break
    raced = choose_winner(
        [Candidate(**{**c.__dict__, "raced_out": c.variant == "KB1/TW4"}) for c in candidates], seed=4
    )
    assert raced is not None and raced.winner.variant == "KB2/TW8"
    assert "KB1/TW4" not in raced.tie_group
    assert not next(s for s in raced.stats if s.variant == "KB1/TW4").eligible  # still visible


def test_log_ratio_interval_matches_the_percentile_interval_at_95() -> None:
    from service.statistics.bootstrap import estimate_median, log_ratio_interval, ratio_interval

    rng = np.random.default_rng(17)
    a = estimate_median(lognormal_times(rng, 10.3, 0.05, 100), seed=1, resamples=4000)
    b = estimate_median(lognormal_times(rng, 10.0, 0.05, 100), seed=2, resamples=4000)
    ratio, (lo, hi) = ratio_interval(a, b)
    ratio_n, (lo_n, hi_n) = log_ratio_interval(a, b, z=1.959964)
    assert ratio_n == pytest.approx(ratio)
    assert lo_n == pytest.approx(lo, abs=0.004) and hi_n == pytest.approx(hi, abs=0.004)
    _, (lo_w, hi_w) = log_ratio_interval(a, b, z=2.9)
    assert lo_w < lo_n < ratio < hi_n < hi_w  # a larger z (more looks) widens it on both sides


def test_raced_out_is_inferred_from_dispatch_counts_within_one_task() -> None:
    from service.statistics.winners import infer_raced_out

    runs = {
        "KB1/TW4": (7, 20),
        "KB2/TW8": (7, 200),
        "KB4/TW8": (7, 200),
        "KB8/TW8": (8, 20),
        "IMP": (None, 0),
    }
    assert infer_raced_out(runs) == {"KB1/TW4"}  # KB8/TW8 ran in another task; imports have none
    assert infer_raced_out({}) == set()
