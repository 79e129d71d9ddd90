"""Stored dispatch rows keep the harness's seq, unique per measurement (the table's key since 0011);
a result that numbers two launches alike fails its task with that reason, on SQLite and Postgres."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from sqlalchemy import func, select

from service.db.models import Dispatch, Measurement, Task
from service.db.session import session_factory
from service.sweeps.service import submit_sweep
from service.sweeps.spec import SweepSpec
from workers.backends.base import ProgressCallback, TaskResult, TaskSpec
from workers.backends.host import HostBackend
from workers.execute import execute_task

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

VARIANTS = ["MX4/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB1/RW2/U4/RG1/PG0/PP0"]


class RepeatedSeqBackend(HostBackend):
    """The real host backend whose first variant reports its second launch under the first's seq."""

    def run_task(self, spec: TaskSpec, progress: ProgressCallback | None = None) -> TaskResult:
        result = super().run_task(spec, progress)
        first = result.results[0]
        rows = [first.dispatches[0], dataclasses.replace(first.dispatches[1], seq=first.dispatches[0].seq)]
        broken = dataclasses.replace(first, dispatches=rows + first.dispatches[2:])
        return dataclasses.replace(result, results=[broken, *result.results[1:]])


def _one_task(url: str) -> int:
    shapes = [{"name": "Key_0", "n": 64, "k": 256}]
    spec = SweepSpec(arch="host", phase="decode", formats=["Q8_0"], shapes=shapes, m=[1], variants=VARIANTS,
                     min_dispatches=5, max_dispatches=5)  # fmt: skip
    with session_factory(url).begin() as session:
        sweep, _ = submit_sweep(session, spec, None, "tests")
        return int(session.scalars(select(Task.id).where(Task.sweep_id == sweep.id)).one())


def test_stored_rows_keep_the_task_wide_seq(migrated_url: str, artifact_dir: Path) -> None:
    task_id = _one_task(migrated_url)
    factory = session_factory(migrated_url)
    assert execute_task(factory, task_id, HostBackend(artifact_dir)) == "done"
    with factory() as session:
        of_task = Measurement.task_id == task_id
        seqs = session.scalars(select(Dispatch.seq).join(Measurement).where(of_task)).all()
        assert sorted(seqs) == list(range(2 * 5))  # interleaved: one numbering for the task
        assert session.scalar(select(func.sum(Measurement.n_dispatches)).where(of_task)) == 10


def test_a_repeated_seq_fails_the_task_with_its_reason(migrated_url: str, artifact_dir: Path) -> None:
    task_id = _one_task(migrated_url)
    factory = session_factory(migrated_url)
    assert execute_task(factory, task_id, RepeatedSeqBackend(artifact_dir)) == "failed"
    with factory() as session:
        task = session.get(Task, task_id)
        assert task is not None and task.error is not None
        assert task.error.startswith("storing the results failed: ValueError: variant ")
        assert "two timed dispatches share seq" in task.error
        assert session.scalar(select(func.count()).select_from(Measurement)) == 0  # rolled back whole
        assert session.scalar(select(func.count()).select_from(Dispatch)) == 0
