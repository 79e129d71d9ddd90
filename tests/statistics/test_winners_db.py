"""refresh_point on a real database: dispatch-based intervals, staleness, incumbency, summaries."""

from __future__ import annotations

import numpy as np
from sqlalchemy import select

from kernels.formats.registry import FORMATS
from service.db.models import TableVersion, Winner
from service.db.session import session_scope
from service.statistics.staleness import Provenance, is_stale
from service.winners import point_measurements, refresh_point
from tests.statistics.dbdata import POINT, add_measurement, device, noisy

ARGS: tuple[str, str, str, int, int, int] = ("host", "decode", "Q8_0", POINT["m"], POINT["n"], POINT["k"])


def test_is_stale_compares_every_provenance_field() -> None:
    base = Provenance("src", "cc 12", "6.1", "rt", "gfx942", 304)
    assert not is_stale(base, base) and not is_stale(base, None)
    for change in (
        {"source_hash": "x"},
        {"toolchain": "cc 13"},
        {"driver_version": "6.2"},
        {"runtime_version": "rt2"},
        {"compute_units": 38},
    ):
        assert is_stale(Provenance(**{**base.__dict__, **change}), base)


def test_refresh_stores_interval_and_ignores_stale(migrated_url: str) -> None:
    rng = np.random.default_rng(0)
    with session_scope(migrated_url) as session:
        old_dev = device(session, driver="6.1")
        # old kernel source: MX4/KB4/RW2/U4/RG1/PG0/PP0 was fastest by far, but that source is gone
        add_measurement(session, "MX4/KB4/RW2/U4/RG1/PG0/PP0", noisy(rng, 5.0), old_dev, source_hash="old")
        add_measurement(session, "MX4/KB1/RW1/U4/RG1/PG0/PP0", noisy(rng, 10.0), old_dev, source_hash="old")
        new_dev = device(session, driver="6.2")
        add_measurement(session, "MX4/KB1/RW1/U4/RG1/PG0/PP0", noisy(rng, 10.0), new_dev, source_hash="new")
        add_measurement(session, "MX4/KB1/RW2/U4/RG1/PG0/PP0", noisy(rng, 11.0), new_dev, source_hash="new")
        winner = refresh_point(session, *ARGS)
        assert winner is not None
        assert (
            winner.variant == "MX4/KB1/RW1/U4/RG1/PG0/PP0"
            and winner.runner_up == "MX4/KB1/RW2/U4/RG1/PG0/PP0"
            and winner.decided
        )
        assert winner.margin_ci_lo is not None and winner.margin_ci_hi is not None
        assert 0.01 < winner.margin_ci_lo <= winner.margin <= winner.margin_ci_hi  # type: ignore[operator]
        flags = {
            (p.variant.name, p.measurement.source_hash): p.stale for p in point_measurements(session, *ARGS)
        }
        assert flags == {
            ("MX4/KB4/RW2/U4/RG1/PG0/PP0", "old"): True,
            ("MX4/KB1/RW1/U4/RG1/PG0/PP0", "old"): True,
            ("MX4/KB1/RW1/U4/RG1/PG0/PP0", "new"): False,
            ("MX4/KB1/RW2/U4/RG1/PG0/PP0", "new"): False,
        }


def test_tie_goes_to_the_incumbent_of_the_latest_table(migrated_url: str) -> None:
    rng = np.random.default_rng(1)
    with session_scope(migrated_url) as session:
        dev = device(session)
        add_measurement(session, "MX4/KB1/RW1/U4/RG1/PG0/PP0", noisy(rng, 10.0, cv=0.05, n=40), dev)
        add_measurement(session, "MX4/KB4/RW2/U2/RG1/PG0/PP0", noisy(rng, 10.0, cv=0.05, n=40), dev)
        first = refresh_point(session, *ARGS)
        assert (
            first is not None and not first.decided and first.variant == "MX4/KB1/RW1/U4/RG1/PG0/PP0"
        )  # simpler variant
        assert sorted(first.tie_group) == ["MX4/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB4/RW2/U2/RG1/PG0/PP0"]
        entry = {
            "codebook": FORMATS["Q8_0"].codebook,
            "m": 1,
            "n": 512,
            "k": 256,
            "variant": "MX4/KB4/RW2/U2/RG1/PG0/PP0",
            "formats": ["Q8_0"],
        }
        session.add(
            TableVersion(
                arch="host",
                phase="decode",
                dialect="llaminar-rocm-decode",
                kernel="tb-decode",
                sha256="0" * 64,
                content="",
                metrics={},
                entries=[entry],
            )
        )
        session.flush()
        second = refresh_point(session, *ARGS)
        assert second is not None and second.variant == "MX4/KB4/RW2/U2/RG1/PG0/PP0" and not second.decided
    with session_scope(migrated_url) as session:
        assert session.scalar(select(Winner.variant)) == "MX4/KB4/RW2/U2/RG1/PG0/PP0"


def test_imported_summaries_fall_back_to_medians(migrated_url: str) -> None:
    with session_scope(migrated_url) as session:
        add_measurement(session, "MX4/KB1/RW1/U4/RG1/PG0/PP0", None, None, median_us=10.0)
        add_measurement(session, "MX4/KB1/RW2/U4/RG1/PG0/PP0", None, None, median_us=10.4)
        near = refresh_point(session, *ARGS)
        assert near is not None and not near.decided and near.margin_ci_lo is None
        add_measurement(session, "MX4/KB1/RW2/U4/RG1/PG0/PP0", None, None, median_us=13.0)
        far = refresh_point(session, *ARGS)
        assert far is not None and far.decided and far.variant == "MX4/KB1/RW1/U4/RG1/PG0/PP0"
