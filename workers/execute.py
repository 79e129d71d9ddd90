"""Run one task by id: claim it, time its variants through a backend, store everything in one transaction.

Celery tasks and the embedded worker both call this; arguments are ids, the database knows the state.
"""

from __future__ import annotations

import socket
import traceback
from datetime import timedelta

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from kernels.families import family_for_phase
from kernels.formats.registry import FORMATS
from service.db.models import Artifact, Device, Dispatch, Measurement, Sweep, Task, Variant, utcnow
from service.statistics.summary import summarize_ns
from service.sweeps.service import refresh_sweep_status
from service.winners import refresh_point
from workers.backends.base import Backend, DeviceInfo, ProgressCallback, TaskResult, TaskSpec

LEASE = timedelta(minutes=30)


def claim_task(session: Session, task_id: int, owner: str) -> Task | None:
    """Atomically move a queued task to running (a conditional UPDATE works on SQLite and Postgres)."""
    now = utcnow()
    result = session.execute(
        update(Task)
        .where(Task.id == task_id, Task.state == "queued")
        .values(
            state="running",
            attempts=Task.attempts + 1,
            lease_owner=owner,
            lease_expires_at=now + LEASE,
            started_at=now,
        )
    )
    if not getattr(result, "rowcount", 0):
        return None
    task = session.get(Task, task_id)
    if task is not None:
        sweep = session.get(Sweep, task.sweep_id)
        if sweep is not None:
            refresh_sweep_status(session, sweep)
    return task


def task_spec(task: Task, sweep: Sweep) -> TaskSpec:
    spec = sweep.spec
    return TaskSpec(
        arch=task.arch,
        phase=task.phase,
        format=task.format,
        shape=task.shape,
        n=task.n,
        k=task.k,
        m=task.m,
        variants=tuple(task.variants),
        min_dispatches=int(spec.get("min_dispatches", 20)),
        max_dispatches=int(spec.get("max_dispatches", 200)),
        warmup=int(spec.get("warmup", 3)),
        seed=int(spec.get("seed", 0)),
        warm_cache=bool(spec.get("warm_cache", False)),
        strategy=str(spec.get("strategy", "exhaustive")),
    )


def execute_task(
    factory: sessionmaker[Session],
    task_id: int,
    backend: Backend,
    owner: str | None = None,
    progress: ProgressCallback | None = None,
) -> str:
    """Returns the task's final state ('done', 'failed') or 'skipped' when it was not claimable."""
    owner = owner or f"{socket.gethostname()}:{backend.name}"
    with factory.begin() as session:
        task = claim_task(session, task_id, owner)
        if task is None:
            return "skipped"
        sweep = session.get(Sweep, task.sweep_id)
        assert sweep is not None
        spec = task_spec(task, sweep)
    try:
        result = backend.run_task(spec, progress)
    except Exception as error:  # the task fails with its reason; the worker lives on
        _finish_failed(factory, task_id, f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=5)}")
        return "failed"
    with factory.begin() as session:
        task = session.get(Task, task_id)
        assert task is not None
        store_task_result(session, task, result)
        task.state = "done"
        task.finished_at = utcnow()
        task.error = None
        refresh_point(session, task.arch, task.phase, task.format, task.m, task.n, task.k)
        sweep = session.get(Sweep, task.sweep_id)
        assert sweep is not None
        refresh_sweep_status(session, sweep)
    return "done"


def _finish_failed(factory: sessionmaker[Session], task_id: int, reason: str) -> None:
    with factory.begin() as session:
        task = session.get(Task, task_id)
        if task is None:
            return
        task.state = "failed"
        task.error = reason
        task.finished_at = utcnow()
        sweep = session.get(Sweep, task.sweep_id)
        if sweep is not None:
            refresh_sweep_status(session, sweep)


def upsert_device(session: Session, info: DeviceInfo) -> Device:
    device = session.scalar(
        select(Device).where(
            Device.uuid == info.uuid,
            Device.driver_version == info.driver_version,
            Device.runtime_version == info.runtime_version,
        )
    )
    if device is None:
        device = Device(
            backend=info.backend,
            arch=info.arch,
            name=info.name,
            compute_units=info.compute_units,
            uuid=info.uuid,
            driver_version=info.driver_version,
            runtime_version=info.runtime_version,
            hostname=socket.gethostname(),
        )
        session.add(device)
        session.flush()
    device.last_seen_at = utcnow()
    return device


def upsert_variant(session: Session, family: str, name: str, params: dict[str, int], order: int) -> Variant:
    variant = session.scalar(select(Variant).where(Variant.family == family, Variant.name == name))
    if variant is None:
        variant = Variant(family=family, name=name, params=params, declared_order=order)
        session.add(variant)
        session.flush()
    return variant


def store_task_result(session: Session, task: Task, result: TaskResult) -> None:
    """Replace this task's measurements (a redelivered task must not duplicate rows)."""
    session.execute(delete(Measurement).where(Measurement.task_id == task.id))
    device = upsert_device(session, result.device)
    task.device_id = device.id
    info = result.artifact
    artifact = session.scalar(select(Artifact).where(Artifact.cache_key == info.cache_key))
    if artifact is None:
        artifact = Artifact(
            cache_key=info.cache_key,
            backend=result.device.backend,
            arch=task.arch,
            family=task.phase,
            format=task.format,
            source_hash=info.source_hash,
            toolchain=info.toolchain,
            flags=list(info.flags),
            path=info.path,
            ok=info.ok,
            log=info.log,
            resources=dict(info.resources),
        )
        session.add(artifact)
        session.flush()
    family = family_for_phase(task.phase)
    backend_name = result.device.backend
    codebook = FORMATS[task.format].codebook
    for variant_result in result.results:
        parsed = family.parse(variant_result.variant, backend_name)
        variant = upsert_variant(session, family.name, parsed.name, dict(parsed.params), parsed.order)
        summary = summarize_ns([d.device_ns for d in variant_result.dispatches])
        wall = summarize_ns([d.wall_ns for d in variant_result.dispatches])
        parity = variant_result.parity
        measurement = Measurement(
            task_id=task.id,
            sweep_id=task.sweep_id,
            variant_id=variant.id,
            artifact_id=artifact.id,
            device_id=device.id,
            arch=task.arch,
            phase=task.phase,
            format=task.format,
            codebook=codebook,
            shape=task.shape,
            n=task.n,
            k=task.k,
            m=task.m,
            source="sweep",
            source_hash=info.source_hash,
            toolchain=info.toolchain,
            n_dispatches=len(variant_result.dispatches),
            wall_median_us=wall.median_us if wall else None,
            cosine=parity.cosine if parity else None,
            rel_l2=parity.rel_l2 if parity else None,
            max_abs=parity.max_abs if parity else None,
            parity_pass=bool(parity and parity.passed and variant_result.error is None),
            parity_sampled_rows=parity.sampled_rows if parity else None,
            error=variant_result.error,
        )
        if summary is not None:
            measurement.median_us = summary.median_us
            measurement.min_us = summary.min_us
            measurement.p10_us = summary.p10_us
            measurement.p90_us = summary.p90_us
            measurement.mean_us = summary.mean_us
            measurement.stddev_us = summary.stddev_us
            measurement.cv = summary.cv
        session.add(measurement)
        session.flush()
        if variant_result.dispatches:
            session.execute(
                insert(Dispatch),
                [
                    {
                        "measurement_id": measurement.id,
                        "seq": d.seq,
                        "device_ns": d.device_ns,
                        "wall_ns": d.wall_ns,
                        "buffer_index": d.buffer_index,
                    }
                    for d in variant_result.dispatches
                ],
            )
