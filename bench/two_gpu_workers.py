"""Two pinned workers, one sweep: each GPU takes tasks and records its own device UUID.

For the two-GPU host (e.g. 2x H200, arch sm_90; or an AMD pair with --arch gfx906). Starts
`tunebase worker --gpu 0` and `--gpu 1` against the given Postgres + Redis, submits one sweep
to arch.<arch>, waits, and prints JSON: per task the device (uuid, name) that ran it, and per
device how many tasks it took. Not run in CI (needs two GPUs).
Usage: .venv/bin/python bench/two_gpu_workers.py --arch sm_90 --database-url URL --broker-url URL
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.config import Settings
from service.db.migrate import upgrade
from service.db.models import Device, Task
from service.db.session import session_factory
from service.sweeps.service import submit_sweep, task_counts
from service.sweeps.spec import SweepSpec
from workers.enqueue import enqueue_sweep

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--broker-url", required=True)
    parser.add_argument("--formats", default="Q8_0,Q4_0")
    parser.add_argument("--profile", default="qwen36-moe")
    parser.add_argument("--timeout", type=float, default=540)
    parser.add_argument("--log-dir", default="var/two-gpu")
    args = parser.parse_args()

    logs = Path(args.log_dir)
    logs.mkdir(parents=True, exist_ok=True)
    upgrade(args.database_url)
    settings = Settings(database_url=args.database_url, broker_url=args.broker_url)
    env = {**os.environ, "TUNEBASE_DATABASE_URL": args.database_url, "TUNEBASE_BROKER_URL": args.broker_url}
    workers = []
    for gpu in (0, 1):
        log = (logs / f"worker-gpu{gpu}.log").open("wb")
        argv = [sys.executable, "-m", "service.cli", "worker", "--gpu", str(gpu), "--arch", args.arch]
        workers.append(subprocess.Popen(argv, env=env, cwd=REPO, stdout=log, stderr=log))
    factory = session_factory(args.database_url)
    spec = SweepSpec.model_validate(
        {"arch": args.arch, "phase": "decode", "formats": args.formats.split(","), "profile": args.profile,
         "m": [1, 2], "labels": {"bench": "two_gpu_workers"}}
    )
    with factory() as session:
        sweep, _ = submit_sweep(session, spec, None, "bench")
        session.commit()
        sweep_id = sweep.id
        enqueue_sweep(settings, session, sweep_id)
    deadline = time.monotonic() + args.timeout
    try:
        while time.monotonic() < deadline:
            with factory() as session:
                counts = task_counts(session, sweep_id)
            if counts["queued"] == 0 and counts["running"] == 0:
                break
            time.sleep(1)
    finally:
        for process in workers:
            process.terminate()
        for process in workers:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    with factory() as session:
        rows = session.execute(
            select(Task.id, Task.shape, Task.format, Task.m, Task.state, Device.uuid, Device.name)
            .outerjoin(Device, Task.device_id == Device.id)
            .where(Task.sweep_id == sweep_id)
            .order_by(Task.id)
        ).all()
        counts = task_counts(session, sweep_id)
    per_device = Counter(r.uuid for r in rows if r.uuid)
    print(
        json.dumps(
            {
                "bench": "two_gpu_workers",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": platform.node(),
                "command": " ".join([".venv/bin/python", "bench/two_gpu_workers.py", *sys.argv[1:]]),
                "sweep_id": sweep_id,
                "tasks": counts,
                "tasks_per_device_uuid": dict(per_device),
                "distinct_devices": len(per_device),
                "rows": [r._asdict() for r in rows],
            },
            indent=2,
            default=str,
        )
    )


if __name__ == "__main__":
    main()
