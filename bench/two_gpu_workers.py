"""Two pinned workers, one sweep: each GPU takes tasks and records its own device UUID.

For the two-GPU host (e.g. 2x H200, arch sm_90; or an AMD pair with --arch gfx906). With
--broker-url it starts `tunebase worker --gpu 0` and `--gpu 1` (Celery) against the given
database + Redis and enqueues the sweep. Without a broker (the device machine has no Redis) it
submits the sweep to the database first and starts two embedded-loop processes, each pinned
to one GPU by CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES (workers.gpus.pinning_env) before
any runtime starts, both claiming tasks from the same database (claims are conditional
UPDATEs, so no task runs twice). Prints JSON: per task the device (uuid, name) that ran it,
and per device how many tasks it took. Not run in CI (needs two GPUs).
Usage: .venv/bin/python bench/two_gpu_workers.py --arch sm_90 --database-url URL [--broker-url URL]
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
from workers.gpus import pinning_env

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--broker-url", default="", help="Celery broker; empty: embedded pinned processes")
    parser.add_argument("--m", default="1,2")
    parser.add_argument("--dispatches", type=int, default=0, help="min = max dispatches (0: spec default)")
    parser.add_argument("--embedded-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--formats", default="Q8_0,Q4_0")
    parser.add_argument("--profile", default="qwen36-moe")
    parser.add_argument("--timeout", type=float, default=540)
    parser.add_argument("--log-dir", default="var/two-gpu")
    args = parser.parse_args()

    if args.embedded_child:
        run_embedded_child(args.database_url, args.arch, Path(args.log_dir))
        return
    logs = Path(args.log_dir)
    logs.mkdir(parents=True, exist_ok=True)
    upgrade(args.database_url)
    settings = Settings(database_url=args.database_url, broker_url=args.broker_url)
    factory = session_factory(args.database_url)
    fields: dict[str, object] = {
        "arch": args.arch, "phase": "decode", "formats": args.formats.split(","), "profile": args.profile,
        "m": [int(v) for v in args.m.split(",") if v], "labels": {"bench": "two_gpu_workers"},
    }  # fmt: skip
    if args.dispatches:
        fields.update(min_dispatches=args.dispatches, max_dispatches=args.dispatches, warmup=1)
    spec = SweepSpec.model_validate(fields)
    with factory() as session:  # submitted before the workers start: embedded ones exit when idle
        sweep, _ = submit_sweep(session, spec, None, "bench")
        session.commit()
        sweep_id = sweep.id
        if args.broker_url:
            from workers.enqueue import enqueue_sweep  # imports Celery: only where a broker is used

            enqueue_sweep(settings, session, sweep_id)
    workers = []
    for gpu in (0, 1):
        log = (logs / f"worker-gpu{gpu}.log").open("wb")
        if args.broker_url:
            env = {**os.environ, "TUNEBASE_DATABASE_URL": args.database_url}
            env["TUNEBASE_BROKER_URL"] = args.broker_url
            argv = [sys.executable, "-m", "service.cli", "worker", "--gpu", str(gpu), "--arch", args.arch]
        else:
            env = {**os.environ, **pinning_env(None, gpu, args.arch)}
            argv = [sys.executable, str(Path(__file__).resolve()), "--embedded-child", "--arch", args.arch,
                    "--database-url", args.database_url, "--log-dir", str(logs / f"gpu{gpu}")]  # fmt: skip
        workers.append(subprocess.Popen(argv, env=env, cwd=REPO, stdout=log, stderr=log))
    deadline = time.monotonic() + args.timeout
    try:
        while time.monotonic() < deadline:
            with factory() as session:
                counts = task_counts(session, sweep_id)
            if counts["queued"] == 0 and counts["running"] == 0:
                break
            if not args.broker_url and all(p.poll() is not None for p in workers):
                break  # both embedded processes gave up (their logs say why)
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
                "mode": "celery" if args.broker_url else "embedded processes pinned per GPU",
                "worker_exit_codes": [p.returncode for p in workers],
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


def run_embedded_child(database_url: str, arch: str, artifact_dir: Path) -> None:
    """One pinned process: the embedded worker's task loop until no queued task of `arch` is left.

    Its environment already pins one GPU, so the backend sees exactly that device and records its UUID.
    """
    from workers.backends.registry import create_backend
    from workers.embedded import run_until_idle

    name = "cuda" if arch.startswith("sm_") else "host" if arch == "host" else "rocm"
    backend = create_backend(name, artifact_dir.resolve())
    device = backend.detect()
    if device is None:
        raise SystemExit(f"no {arch} device visible to this process")
    print(f"pinned {os.environ.get('CUDA_VISIBLE_DEVICES', os.environ.get('ROCR_VISIBLE_DEVICES'))}: "
          f"{device.name} {device.uuid}", flush=True)  # fmt: skip
    ran = run_until_idle(session_factory(database_url), backend, [arch])
    print(f"ran {ran} tasks", flush=True)


if __name__ == "__main__":
    main()
