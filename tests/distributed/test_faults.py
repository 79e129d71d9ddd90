"""Fault tests with real Celery worker processes, a real (private) Redis and a real Postgres.

Every scenario ends with the sweep complete and with no duplicate measurement or dispatch rows.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from sqlalchemy import create_engine, select, text

from kernels.packages.loader import builtin_packages
from service.db.models import Task
from tests.distributed.conftest import Cluster, descendants, kill_tree, smoke_spec
from workers.enqueue import send_tasks
from workers.reconciler import ReconcileReport, broker_queue_size, reconcile


def reconciler(cluster: Cluster, reports: list[ReconcileReport]) -> None:
    """One pass of the real reconciler (what beat runs) against the cluster's DB and broker."""
    settings = cluster.settings
    reports.append(
        reconcile(
            cluster.factory,
            settings,
            lambda items: send_tasks(settings.broker_url, items),
            broker_queue_size(settings.broker_url),
        )
    )


def owner_pid(task: Task) -> int:
    assert task.lease_owner is not None
    return int(task.lease_owner.rpartition(":")[2])


def test_sigkill_of_the_pool_process_redelivers_the_task(cluster: Cluster) -> None:
    """The process running a task dies: late ack + reject-on-worker-lost redeliver it, and the
    new pool process may claim it at once because the owner's pid is gone."""
    cluster.start_worker("w1")
    sweep_id = cluster.submit(smoke_spec(min_dispatches=400))
    cluster.wait(sweep_id, 90, until=lambda c: c["running"] > 0)
    victim = cluster.running_tasks(sweep_id)[0]
    kill_tree(owner_pid(victim))  # the pool child and its watchdog child; the worker's main lives
    counts = cluster.wait(sweep_id, 120)
    assert counts["done"] == counts["total"] == 4, counts
    with cluster.factory() as session:
        task = session.get(Task, victim.id)
        assert task is not None and task.state == "done" and task.attempts == 2
    cluster.assert_no_duplicates(sweep_id)


def test_sigkill_of_a_whole_worker_is_recovered_by_the_reconciler(cluster: Cluster) -> None:
    """A worker and its children die at once (a lost machine): its message stays unacked, its lease
    lapses, the reconciler re-queues and re-sends the task, the surviving worker runs it."""
    first = cluster.start_worker("w1")
    cluster.start_worker("w2")
    sweep_id = cluster.submit(smoke_spec(min_dispatches=400))
    cluster.wait(sweep_id, 90, until=lambda c: c["running"] > 0)
    victim = cluster.running_tasks(sweep_id)[0]
    pid = owner_pid(victim)
    main = next(w for w in cluster.workers if pid in descendants(w.pid))
    kill_tree(main.pid)
    reports: list[ReconcileReport] = []
    counts = cluster.wait(sweep_id, 150, every=lambda: reconciler(cluster, reports))
    assert counts["done"] == counts["total"] == 4, counts
    assert any(victim.id in r.requeued for r in reports), [r.as_dict() for r in reports]
    assert main.poll() is not None and (first is main or first.poll() is None)
    cluster.assert_no_duplicates(sweep_id)


def test_redis_restart_mid_sweep_is_recovered_by_the_reconciler(cluster: Cluster) -> None:
    """Redis restarts without persistence: every queued message is gone; the DB still knows the
    tasks, and the reconciler re-sends them once their arch queue is seen empty."""
    cluster.start_worker("w1")
    shapes = [{"name": f"Redis_{i}", "n": 512, "k": 2048 + 32 * i} for i in range(6)]
    spec = smoke_spec(shapes=shapes, min_dispatches=1000)
    sweep_id = cluster.submit(spec)
    cluster.wait(sweep_id, 90, until=lambda c: c["done"] >= 1)
    cluster.redis.restart()
    lost = cluster.counts(sweep_id)["queued"]
    assert lost > 0, "the sweep finished before Redis restarted; nothing was tested"
    reports: list[ReconcileReport] = []
    counts = cluster.wait(sweep_id, 150, every=lambda: reconciler(cluster, reports))
    assert counts["done"] == counts["total"] == 6, counts
    assert sum(len(r.resent) for r in reports) >= lost
    cluster.assert_no_duplicates(sweep_id)


def test_dropped_postgres_connection_during_the_write_is_retried(cluster: Cluster) -> None:
    """pg_terminate_backend hits the worker's connection while it writes dispatch rows: that
    transaction rolls back whole, the write is retried on a new connection, nothing is half-written."""
    app_name = f"tb_victim_{os.getpid()}"
    cluster.start_worker("w1", database_url=f"{cluster.database_url}?application_name={app_name}")
    admin = create_engine(cluster.database_url, isolation_level="AUTOCOMMIT")
    killed: list[int] = []
    stop = threading.Event()

    def killer() -> None:
        with admin.connect() as connection:
            while not stop.is_set() and len(killed) < 2:
                pid = connection.scalar(
                    text(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = :name "
                        "AND state <> 'idle' AND query ILIKE '%dispatches%' LIMIT 1"
                    ),
                    {"name": app_name},
                )
                if pid is not None and connection.scalar(text("SELECT pg_terminate_backend(:p)"), {"p": pid}):
                    killed.append(int(pid))
                time.sleep(0.002)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    variants = [v.name for v in builtin_packages()["tb-decode"].space("host")]
    spec = smoke_spec(
        shapes=[{"name": "Drop_0", "n": 64, "k": 256}, {"name": "Drop_1", "n": 64, "k": 512}],
        variants=variants,
        min_dispatches=3000,
        warmup=1,
    )
    sweep_id = cluster.submit(spec)
    try:
        counts = cluster.wait(sweep_id, 150)
    finally:
        stop.set()
        thread.join(10)
        admin.dispose()
    assert killed, "the killer never caught a write in flight; nothing was tested"
    assert counts["done"] == counts["total"] == 2, counts
    assert "retrying" in cluster.log("w1")
    cluster.assert_no_duplicates(sweep_id)


def test_a_hanging_harness_is_ended_by_the_watchdog(cluster: Cluster) -> None:
    """A backend call that never returns is killed after the timeout; its task fails with the
    reason and the same worker goes on with the next tasks."""
    cluster.extra_env.update(
        TUNEBASE_BACKEND_FACTORY="tests.distributed.hanging:make_backend", TUNEBASE_TASK_TIMEOUT_SECONDS="8"
    )
    worker = cluster.start_worker("w1")
    shapes = [
        {"name": "Ok_Before", "n": 128, "k": 256},
        {"name": "Hang_Forever", "n": 128, "k": 512},
        {"name": "Ok_After", "n": 128, "k": 768},
    ]
    sweep_id = cluster.submit(smoke_spec(shapes=shapes))
    hung_children: set[int] = set()

    def watch() -> None:  # the watchdog children alive while the hanging task runs
        if any(t.shape == "Hang_Forever" for t in cluster.running_tasks(sweep_id)):
            hung_children.update(p for p in descendants(worker.pid) if _is_isolation_child(p))

    counts = cluster.wait(sweep_id, 120, every=watch)
    assert counts["done"] == 2 and counts["failed"] == 1, counts
    with cluster.factory() as session:
        hung = session.scalar(select(Task).where(Task.sweep_id == sweep_id, Task.shape == "Hang_Forever"))
        assert hung is not None and hung.state == "failed" and hung.error is not None
        assert "watchdog" in hung.error and "killed" in hung.error
    assert worker.poll() is None  # the worker lives on
    assert hung_children, "the hanging task was never seen running; nothing was tested"
    survivors = [p for p in descendants(worker.pid) if _is_isolation_child(p)]
    assert not hung_children & set(survivors)  # the hung child is gone ...
    assert len(survivors) <= 1  # ... and at most the fresh resident child that ran Ok_After remains
    cluster.assert_no_duplicates(sweep_id)


def _is_isolation_child(pid: int) -> bool:
    try:
        return b"workers.isolation" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_cancelled_tasks_are_not_run_when_their_messages_arrive(cluster: Cluster) -> None:
    """Cancel in the DB before any worker runs: the messages are still in Redis, yet nothing runs."""
    from service.db.models import Sweep
    from service.sweeps.service import cancel_sweep

    sweep_id = cluster.submit(smoke_spec())
    with cluster.factory.begin() as session:
        sweep = session.get(Sweep, sweep_id)
        assert sweep is not None
        assert cancel_sweep(session, sweep) == 4
    cluster.start_worker("w1")
    deadline = time.monotonic() + 60
    while "tunebase.run_task" not in cluster.log("w1") or cluster.log("w1").count("skipped") < 4:
        assert time.monotonic() < deadline, cluster.log("w1")
        time.sleep(0.3)
    counts = cluster.counts(sweep_id)
    assert counts["cancelled"] == 4 and counts["done"] == 0, counts
