"""Results the database refuses must end their task, never leave it "running" under a live worker.

A permanent error while storing (a NUL in harness text, a unique violation) used to be retried as a
Celery message, skipped as "a live owner holds it" while the same process's heartbeat renewed the
lease, so the sweep never finished. Real Celery worker processes, real Redis, real Postgres.
"""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from service.db.models import Measurement, Sweep, Task, Winner
from service.db.session import session_factory
from service.winners import refresh_point
from tests.distributed.conftest import Cluster, smoke_spec
from tests.reliability.seed import seed_dispatches

HOSTILE = "tests.distributed.hostile:make_backend"


def test_nul_in_harness_error_is_stored_and_the_sweep_finishes(cluster: Cluster) -> None:
    cluster.extra_env.update(TUNEBASE_BACKEND_FACTORY=HOSTILE)
    cluster.start_worker("w1")
    spec = smoke_spec(shapes=[{"name": "Nul_0", "n": 64, "k": 256}, {"name": "Ok_0", "n": 64, "k": 512}])
    sweep_id = cluster.submit(spec)
    counts = cluster.wait(sweep_id, 120)
    assert counts["done"] == counts["total"] == 2, counts
    with cluster.factory() as session:
        errors = session.scalars(
            select(Measurement.error).where(Measurement.sweep_id == sweep_id, Measurement.error.is_not(None))
        ).all()
        assert errors == ["harness said: bad\ufffdbyte \ufffd here"]
        sweep = session.get(Sweep, sweep_id)
        assert sweep is not None and sweep.status == "done"
    cluster.assert_no_duplicates(sweep_id)


def test_a_permanent_store_error_fails_the_task_with_its_reason(cluster: Cluster) -> None:
    cluster.extra_env.update(TUNEBASE_BACKEND_FACTORY=HOSTILE)
    cluster.start_worker("w1")
    spec = smoke_spec(shapes=[{"name": "Twice_0", "n": 64, "k": 256}, {"name": "Ok_0", "n": 64, "k": 512}])
    sweep_id = cluster.submit(spec)
    counts = cluster.wait(sweep_id, 120)
    assert counts["done"] == 1 and counts["failed"] == 1, counts
    with cluster.factory() as session:
        failed = session.scalars(select(Task).where(Task.sweep_id == sweep_id, Task.state == "failed")).one()
        assert failed.shape == "Twice_0" and failed.attempts == 1
        assert failed.error is not None
        assert failed.error.startswith("storing the results failed: IntegrityError")
        assert "uq_measurement_task_variant" in failed.error
        assert failed.lease_owner is None and failed.finished_at is not None
        # the failed store rolled back whole: no measurement of the failed task remains
        assert session.scalar(select(func.count()).where(Measurement.task_id == failed.id)) == 0
        sweep = session.get(Sweep, sweep_id)
        assert sweep is not None and sweep.status == "failed" and sweep.finished_at is not None


def test_two_workers_deciding_one_new_point_at_once_both_commit(cluster: Cluster) -> None:
    """Select-then-insert made the second transaction die on uq_winner_point; now it waits and updates."""
    factory = session_factory(cluster.database_url)
    with factory.begin() as session:
        seed_dispatches(session, 2, 30, label="race")
    first_inserted = threading.Event()
    errors: list[BaseException] = []

    def decide(hold: bool) -> None:
        try:
            with factory.begin() as session:
                refresh_point(session, "host", "decode", "Q8_0", 1, 64, 64)
                if hold:  # keep the new row uncommitted while the other transaction tries too
                    first_inserted.set()
                    threading.Event().wait(1.0)
        except BaseException as error:
            errors.append(error)
            first_inserted.set()

    holder = threading.Thread(target=decide, args=(True,))
    holder.start()
    first_inserted.wait(30)
    decide(False)
    holder.join(30)
    assert errors == []
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(Winner)) == 1
