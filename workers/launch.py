"""Start one Celery worker process pinned to a device (behind `tunebase worker`)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from workers.celery_app import ARCHES, arch_queue
from workers.gpus import Gpu, detect_gpus, pinning_env


class LaunchError(ValueError):
    """Bad worker arguments (the CLI exits 2 with the message)."""


@dataclass(frozen=True)
class WorkerPlan:
    arch: str | None
    gpu: int | None
    queues: list[str]
    env: dict[str, str]
    name: str


def plan_worker(gpu: int | None, arch: str | None, extra_queues: list[str], default_arch: str) -> WorkerPlan:
    found: Gpu | None = None
    if gpu is not None:
        found = next((g for g in detect_gpus() if g.index == gpu), None)
        if arch is None:
            if found is None:
                raise LaunchError(f"no GPU {gpu} detected; pass --arch to pin it anyway")
            arch = found.arch
    elif arch is None and not extra_queues:
        arch = default_arch
    if arch is not None and arch not in ARCHES:
        raise LaunchError(f"unknown arch {arch!r}; known: {', '.join(ARCHES)}")
    queues = ([arch_queue(arch)] if arch else []) + extra_queues
    env = pinning_env(found, gpu, arch or "")
    if arch:
        env["TUNEBASE_WORKER_ARCH"] = arch
    label = ".".join(p for p in (arch, f"gpu{gpu}" if gpu is not None else None) if p) or "ops"
    return WorkerPlan(arch, gpu, queues, env, f"{label}.{os.getpid()}@{socket.gethostname()}")


def run_worker(plan: WorkerPlan, loglevel: str = "INFO") -> None:
    """Pin first (environment), then start Celery: backends initialise later, inside the pool process."""
    os.environ.update(plan.env)
    from workers.celery_app import app

    app.worker_main(
        [
            "worker",
            "--queues",
            ",".join(plan.queues),
            "--concurrency",
            "1",
            "--prefetch-multiplier",
            "1",
            "--hostname",
            plan.name,
            "--loglevel",
            loglevel,
            "--without-gossip",
            "--without-mingle",
        ]
    )
