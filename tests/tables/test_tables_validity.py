"""No fallback answers a variant the package rules out anywhere on the domain grid (service.tables.validity:
N and K 256..65536, each M key), whichever policy a codebook takes; where no variant of the table is valid a
tree answers nothing; and the generator checks every table it emits on that grid."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kernels.packages.loader import builtin_packages
from service.tables import PointTimes, TableChoice, generate_table
from service.tables import generate as generate_module
from service.tables.model import GeneratedTable, MeasuredPoint
from service.tables.policy import POLICIES, Fallback, PolicyChoice, fit_policy
from service.tables.tree import FallbackTree, TreeNode
from service.tables.validate import TableValidationError
from service.tables.validity import (
    domain_grid_ks,
    domain_ns,
    domain_violations,
    validity_for,
)
from tests.tables.conftest import grid_points

NS = (512, 1024, 2048, 4096, 8192)
KS = (512, 1024, 2048, 4096)  # the measured K: D's restriction flips above it, E's below it
MS = (1, 2)
KEYS = [(0, m) for m in MS]


def d_and_e_limits(variant: str, codebook: int, m: int, n: int, k: int) -> bool:
    """D's K slice stops fitting shared memory past K = 8192; E needs K >= 512 (a whole stage)."""
    if variant == "D":
        return k <= 8192
    if variant == "E":
        return k >= 512
    return True


def d_long_e_short(m: int, n: int, k: int) -> dict[str, float]:
    """D 10% ahead at K >= 2048 and E 15% ahead at K <= 1024, at every measured shape: a fallback that
    extrapolates keeps D beyond and E below the measured K."""
    base = n * k / 1e6 + 3.0
    return {
        "A": base,
        "B": base * 1.05,
        "D": base * (0.9 if k >= 2048 else 1.2),
        "E": base * (0.85 if k <= 1024 else 1.3),
    }


def answers(fallback: Fallback) -> set[str | None]:
    return {fallback.answer(0, m, n, k) for m in MS for n in domain_ns() for k in domain_grid_ks()}


@pytest.mark.parametrize("policy", POLICIES)
def test_no_policy_answers_a_variant_ruled_out_above_or_below_the_measured_range(policy: str) -> None:
    points = grid_points(d_long_e_short, MS, NS, KS)
    fallback = fit_policy(points, (policy,), validity=d_and_e_limits)
    assert fallback.choices[0].policy == policy
    assert domain_violations(fallback.answer, d_and_e_limits, KEYS) == []
    assert None not in answers(fallback)  # A and B run everywhere: every cell is answered
    if policy != "segments":  # the trees keep D and E where they can run (segments cannot cut on K)
        assert {"D", "E"} <= answers(fallback)
        assert fallback.answer(0, 1, 1024, 4096) == "D" and fallback.answer(0, 1, 1024, 1024) == "E"


@pytest.mark.parametrize("policy", ["segments", "tree"])
def test_without_validity_the_same_fit_leaks(policy: str) -> None:
    """The control: fitted on the times alone, tree and segments answer D past 8192 or E below 512."""
    points = grid_points(d_long_e_short, MS, NS, KS)
    leaky = fit_policy(points, (policy,))
    assert domain_violations(leaky.answer, d_and_e_limits, KEYS)


def nothing_past_16384_at_m2(variant: str, codebook: int, m: int, n: int, k: int) -> bool:
    """At M = 2 no kernel's K slice fits past K = 16384 (every variant ruled out); D not past 8192."""
    return not (m == 2 and k > 16384) and (variant != "D" or k <= 8192)


@pytest.mark.parametrize("policy", ["tree", "surrogate", "neighbours"])
def test_where_nothing_is_valid_a_tree_answers_nothing(policy: str) -> None:
    points = grid_points(d_long_e_short, MS, NS, KS)
    fallback = fit_policy(points, (policy,), validity=nothing_past_16384_at_m2)
    assert domain_violations(fallback.answer, nothing_past_16384_at_m2, KEYS) == []
    for n in (256, 4096, 65536):
        assert fallback.answer(0, 2, n, 32768) is None and fallback.answer(0, 2, n, 65536) is None
        assert fallback.answer(0, 1, n, 65536) in ("A", "B")
        assert fallback.answer(0, 2, n, 4096) == "D"


def test_segments_step_aside_where_nothing_is_valid() -> None:
    """Segments can only answer one variant over their whole work range, never nothing: the codebook
    takes the tree, and its header line says why."""
    points = grid_points(d_long_e_short, MS, NS, KS)
    fallback = fit_policy(points, ("segments", "tree"), validity=nothing_past_16384_at_m2)
    choice = fallback.choices[0]
    assert choice.policy == "tree" and "segments ruled out: they answer" in choice.describe()
    assert domain_violations(fallback.answer, nothing_past_16384_at_m2, KEYS) == []


# The CI case on the real package (tb-decode, sm_90): a cp.async ring (PP2, 3 blocks per SM) that wins
# the measured long K but whose shared memory no longer fits past K = 4352 at M = 2 (8960 at M = 1).
RING, PLAIN, PLAIN2 = "MX2/KB1/RW2/U4/RG1/PG3/PP2", "MX4/KB1/RW2/U2/RG1/PG0/PP2", "MX4/KB1/RW1/U4/RG1/PG0/PP2"


def ring_wins_long_k(m: int, n: int, k: int) -> dict[str, float]:
    base = n * k / 1e6 + 3.0
    return {PLAIN: base, PLAIN2: base * 1.05, RING: base * (0.9 if k >= 2048 else 1.2)}


def table_input(
    times: Callable[[int, int, int], dict[str, float]] = ring_wins_long_k,
) -> tuple[list[TableChoice], list[PointTimes]]:
    points = grid_points(times, MS, (1024, 2048, 4096, 8192), (1024, 2048, 4096))
    choices = [TableChoice(p.codebook, ("Q4_0",), p.m, p.n, p.k, p.shape, p.winner, 1.0) for p in points]
    times_ = [PointTimes(p.codebook, p.m, p.n, p.k, p.shape, dict(p.times_us or {})) for p in points]
    return choices, times_


def json_table(
    policies: tuple[str, ...], data: tuple[list[TableChoice], list[PointTimes]] | None = None
) -> GeneratedTable:
    choices, times = data or table_input()
    package = builtin_packages()["tb-decode"]
    return generate_table(
        choices, times, "sm_90", ["7"], "json", phase="decode", package=package, policies=policies
    )


@pytest.mark.parametrize("policy", ["segments", "tree"])
def test_generated_table_is_checked_on_the_domain_grid(policy: str, tmp_path: Path) -> None:
    table = json_table((policy,))
    line = f"answers valid on the domain grid ({len(domain_ns())} N x {len(domain_grid_ks())} K points)"
    assert table.fallback_policies == {0: policy} and line in table.checks
    from service.tables.dialects import get_dialect

    dialect = get_dialect("json", "decode", builtin_packages()["tb-decode"], {RING, PLAIN, PLAIN2})
    held_out = (0, 2, 10240, 5120)  # CI's held-out point: the ring needs more shared memory than the SM has
    got = dialect.replay_text(table.text, [held_out, (0, 2, 4096, 4096)], tmp_path)
    valid = validity_for([RING, PLAIN, PLAIN2], "sm_90")
    assert not valid(RING, *held_out)
    assert got[held_out] in (dialect.parse_variant(PLAIN), dialect.parse_variant(PLAIN2))
    assert got[(0, 2, 4096, 4096)] == dialect.parse_variant(RING) or policy == "segments"


def test_generator_rejects_a_table_whose_fallback_leaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fallback answering the ring everywhere (what the tree answered before keep_valid) fails the check,
    which names the cell and the variant."""

    def leaky(points: list[MeasuredPoint], *args: object, **kwargs: object) -> Fallback:
        tree = FallbackTree(0, MS, TreeNode(RING, points=len(points), regret=0.0, best=RING), 0, 1)
        return Fallback({}, {0: tree}, {0: PolicyChoice(0, "tree", None, None, 1, 1)})

    monkeypatch.setattr(generate_module, "fit_policy", leaky)
    with pytest.raises(TableValidationError) as raised:
        json_table(("tree",))
    failures = raised.value.failures
    assert failures[0] == f"CB=0 M=1 256x9728: answers {RING}, which the package rules out there"
    assert failures[-1].startswith("... and ") and failures[-1].endswith(" more cells of the domain grid")


SHORT_RINGS = ("MX2/KB1/RW2/U4/RG1/PG3/PP2", "MX2/KB1/RW2/U2/RG1/PG3/PP2", "MX2/KB1/RW2/U4/RG1/PG2/PP2")


def only_rings(m: int, n: int, k: int) -> dict[str, float]:
    """Every variant of the table is a ring whose shared memory stops fitting at M = 2 by K = 19968."""
    base = n * k / 1e6 + 3.0
    a, b, c = SHORT_RINGS
    return {a: base * (0.9 if k >= 2048 else 1.2), b: base, c: base * 1.05}


def test_where_no_variant_of_the_table_runs_the_table_answers_nothing(tmp_path: Path) -> None:
    data = table_input(only_rings)
    table = json_table(("tree",), data)
    doc = json.loads(table.text)
    assert '"config": null' in table.text and "config is null answers nothing" in doc["tree"]
    from service.tables.dialects import get_dialect

    dialect = get_dialect("json", "decode", builtin_packages()["tb-decode"], set(SHORT_RINGS))
    got = dialect.replay_text(table.text, [(0, 2, 4096, 32768), (0, 1, 4096, 32768)], tmp_path)
    assert got[(0, 2, 4096, 32768)] is None and got[(0, 1, 4096, 32768)] is not None
    with pytest.raises(TableValidationError, match="which the package rules out there"):
        json_table(("segments",), data)  # segments cannot answer nothing: the generator says so


def test_cpp_table_returns_false_where_no_variant_runs() -> None:
    """The struct-table C++ compiles with NO_ANSWER leaves, and its replay (which probes each M of a tree
    at the largest K) agrees with the Python lookup there."""
    choices, times = table_input(only_rings)
    package = builtin_packages()["tb-decode"]
    table = generate_table(
        choices, times, "sm_90", ["7"], "struct-table", phase="decode", package=package, policies=("tree",)
    )
    assert "return false;  // no variant of the table is valid here" in table.text
    assert any(c.startswith("replay reproduces") for c in table.checks)
    assert any(c.startswith("answers valid on the domain grid") for c in table.checks)


def test_keep_valid_reads_k_divisibility_splits_and_checks_every_k_they_hold() -> None:
    """D runs at K % 1024 == 0 up to K = 4096 and wins at every multiple of 1024 the rows hold (to
    8192). A tree split on K % 1024 keeps D where it runs: the 8-neighbour rule alone would rule it out
    at every K (its grid neighbours are never multiples of 1024). Past 4096 keep_valid takes it out: a
    leaf ``k % 1024 <= 0`` is checked at each K it holds, not passed for holding no domain cell."""
    import numpy as np

    from service.tables.tree import KModFeature, fit_tree_matrix

    def d_divides(variant: str, codebook: int, m: int, n: int, k: int) -> bool:
        return variant != "D" or (k % 1024 == 0 and k <= 4096)

    feature = KModFeature(1024, 8192)
    ks = list(range(1024, 8192 + 1, 256))
    base = np.array([[1, n, k] for n in (1024, 4096) for k in ks], dtype=np.int64)
    matrix = np.array([[0.0, 0.1] if k % 1024 == 0 else [MISSING, 0.0] for _, _, k in base])
    root = fit_tree_matrix(
        matrix, ["D", "E"], base, {}, 4, 1, extra_features=[feature.name], validity=d_divides
    )
    assert feature.name in root.features()
    for n in (256, 1024, 4096, 65536):
        for k in range(256, 65536 + 1, 256):
            assert d_divides(root.answer(1, n, k), 0, 1, n, k), (n, k)
        assert [k for k in ks if root.answer(1, n, k) == "D"] == [1024, 2048, 3072, 4096]


MISSING = 1e6
