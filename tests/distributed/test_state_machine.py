"""The task state machine without workers: claims, redelivery, leases, attempts, the reconciler."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.db.models import Task, utcnow
from service.db.session import session_factory
from service.sweeps.service import submit_sweep
from service.sweeps.spec import SweepSpec
from workers.execute import Policy, claim_task
from workers.reconciler import reconcile

SPEC = {"arch": "host", "phase": "decode", "formats": ["Q8_0"], "shapes": [{"name": "S", "n": 64, "k": 256}],
        "m": [1], "variants": ["MX4/KB1/RW1/U4/RG1/PG0/PP0"]}  # fmt: skip


@pytest.fixture
def one_task(migrated_url: str) -> tuple[sessionmaker[Session], int]:
    factory = session_factory(migrated_url)
    with factory.begin() as session:
        sweep, _ = submit_sweep(session, SweepSpec.model_validate(SPEC), None, "test")
        session.flush()
        return factory, sweep.tasks[0].id


def state(factory: sessionmaker[Session], task_id: int) -> Task:
    with factory() as session:
        task = session.get(Task, task_id)
        assert task is not None
        return task


def test_redelivery_is_a_no_op_unless_the_claim_lapsed(one_task: tuple[sessionmaker[Session], int]) -> None:
    factory, task_id = one_task
    policy = Policy(lease=timedelta(seconds=60), max_attempts=2)
    with factory.begin() as session:
        assert claim_task(session, task_id, "elsewhere:1", policy) is not None
    with factory.begin() as session:  # a duplicate message while the owner's lease is live
        assert claim_task(session, task_id, "elsewhere:2", policy) is None
    with factory.begin() as session:  # the lease lapses: claimable again, attempt 2, reason kept
        session.get_one(Task, task_id).lease_expires_at = utcnow() - timedelta(seconds=1)
    with factory.begin() as session:
        assert claim_task(session, task_id, "elsewhere:3", policy) is not None
    task = state(factory, task_id)
    assert (task.state, task.attempts, task.lease_owner) == ("running", 2, "elsewhere:3")
    assert task.error is not None and "elsewhere:1" in task.error
    with factory.begin() as session:  # out of attempts: fails with the reason, never runs a third time
        session.get_one(Task, task_id).lease_expires_at = utcnow() - timedelta(seconds=1)
    with factory.begin() as session:
        assert claim_task(session, task_id, "elsewhere:4", policy) is None
    task = state(factory, task_id)
    assert task.state == "failed" and task.error is not None and "gave up after 2 attempts" in task.error
    with factory.begin() as session:  # a finished task stays finished
        assert claim_task(session, task_id, "elsewhere:5", policy) is None


def test_an_owner_that_died_on_this_host_frees_its_task(one_task: tuple[sessionmaker[Session], int]) -> None:
    import socket

    factory, task_id = one_task
    dead_pid = 2**22 + 12345  # above pid_max's default: no such process
    with factory.begin() as session:
        assert claim_task(session, task_id, f"{socket.gethostname()}:{dead_pid}") is not None
    with factory.begin() as session:
        assert claim_task(session, task_id, "next:1") is not None
    assert state(factory, task_id).attempts == 2


def test_reconciler_requeues_expired_leases_and_sends_never_sent_tasks(
    one_task: tuple[sessionmaker[Session], int],
) -> None:
    factory, task_id = one_task
    settings = Settings(max_attempts=3, requeue_lost_after_seconds=1)
    sent: list[tuple[int, str]] = []

    def send(items: Iterable[tuple[int, str]]) -> list[int]:
        sent.extend(items)
        return [i for i, _ in sent]

    report = reconcile(factory, settings, send, lambda arch: 0)
    assert report.resent == [task_id] and sent == [(task_id, "host")]  # never sent before
    assert state(factory, task_id).enqueued_at is not None
    sent.clear()
    assert reconcile(factory, settings, send, lambda arch: 5).resent == []  # just sent, queue busy
    with factory.begin() as session:
        assert claim_task(session, task_id, "gone:1") is not None
        session.get_one(Task, task_id).lease_expires_at = utcnow() - timedelta(seconds=1)
    report = reconcile(factory, settings, send, lambda arch: 0)
    assert report.requeued == [task_id] and report.resent == [task_id]
    task = state(factory, task_id)
    assert task.state == "queued" and task.lease_owner is None and "gone:1" in (task.error or "")


def test_a_claim_this_process_no_longer_runs_is_neither_renewed_nor_kept(
    one_task: tuple[sessionmaker[Session], int],
) -> None:
    """An execution that ended without a final state (an escaped error) must not keep its task
    "running": the heartbeat renews only tasks being executed, and the owner's next message takes
    the orphaned claim back (one more attempt) instead of skipping it as "a live owner holds it"."""
    from workers.execute import ACTIVE, owner_name
    from workers.tasks import Heartbeat

    factory, task_id = one_task
    policy = Policy(lease=timedelta(seconds=60), max_attempts=3)
    owner = owner_name()
    settings = Settings(lease_seconds=600, heartbeat_seconds=1)
    with factory.begin() as session:
        assert claim_task(session, task_id, owner, policy) is not None
    before = state(factory, task_id).lease_expires_at
    heartbeat = Heartbeat(factory, owner, settings, None)
    heartbeat.beat()  # not executing: the lease is left to lapse
    assert state(factory, task_id).lease_expires_at == before
    ACTIVE.add(task_id)
    try:
        heartbeat.beat()  # executing: renewed
        renewed = state(factory, task_id).lease_expires_at
        assert renewed is not None and before is not None and renewed > before
        with factory.begin() as session:  # a duplicate message while it really runs: skipped
            assert claim_task(session, task_id, owner, policy) is None
    finally:
        ACTIVE.discard(task_id)
    with factory.begin() as session:  # the run ended unfinished: the next message re-claims it
        assert claim_task(session, task_id, owner, policy) is not None
    task = state(factory, task_id)
    assert (task.state, task.attempts) == ("running", 2)
    assert task.error is not None and "ended unfinished" in task.error
