"""`tunebase demo`: the whole product on the embedded default, in one process, with a progress bar."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import select

from service.api.routes.winners import winner_item
from service.config import Settings
from service.db.migrate import upgrade
from service.db.models import Task, Winner
from service.db.session import session_factory
from service.sweeps.service import submit_sweep
from service.sweeps.spec import SweepSpec
from service.tables.versions import default_table_dialect, generate_and_store
from workers.backends.registry import create_backend
from workers.execute import execute_task


@dataclass
class DemoResult:
    sweep_id: int
    device: str
    winners: list[dict[str, Any]]
    table_path: Path
    sha256: str


def run_demo(
    settings: Settings, formats: list[str], profile: str, dispatches: int, output: Path, console: Console
) -> DemoResult:
    url = settings.resolved_database_url
    upgrade(url)
    spec = SweepSpec(
        arch="host",
        phase="decode",
        formats=formats,
        profile=profile,
        min_dispatches=dispatches,
        max_dispatches=max(dispatches, 200),
        labels={"source": "demo"},
    )
    factory = session_factory(url)
    with factory.begin() as session:
        sweep, _ = submit_sweep(session, spec, None, "demo")
        sweep_id = sweep.id
        task_ids = [
            t.id for t in session.scalars(select(Task).where(Task.sweep_id == sweep_id).order_by(Task.id))
        ]
    backend = create_backend("host", settings.resolved_artifact_dir)
    device = backend.detect()
    if device is None:
        raise ValueError("no C compiler found: the host backend cannot build kernels (install gcc)")
    console.print(
        f"sweep {sweep_id}: {len(task_ids)} tasks on {device.name} ({settings.resolved_database_url})"
    )
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("tasks", total=len(task_ids))
        for task_id in task_ids:
            execute_task(factory, task_id, backend)
            progress.advance(bar)
    with factory.begin() as session:
        rows = session.scalars(
            select(Winner)
            .where(Winner.arch == "host", Winner.phase == "decode", Winner.format.in_(formats))
            .order_by(Winner.format, Winner.n, Winner.k, Winner.m)
        ).all()
        winners = [winner_item(w) for w in rows if sweep_id in (w.sweep_ids or [])]
        version = generate_and_store(
            session, "host", "decode", default_table_dialect(session, "host", "decode")
        )
        content, sha = version.content, version.sha256
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(content)
    return DemoResult(sweep_id, device.name, winners, output, sha)
