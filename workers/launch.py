"""Start one Celery worker process pinned to a device (behind `tunebase worker`)."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from kernels.arches import BACKENDS
from workers.celery_app import ARCHES, arch_queue, compile_queue
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
    concurrency: int = 1  # one task at a time per GPU; the compile worker runs one per core


def plan_compile_worker(
    extra_queues: list[str], concurrency: int | None = None, backends: Sequence[str] = ()
) -> WorkerPlan:
    """A CPU worker for the compile queues of ``backends`` (default: every backend's; an image that has one
    toolchain names its backend), no GPU (CUDA_/ROCR_/HIP_VISIBLE_DEVICES empty), one pool process per core
    unless told otherwise."""
    if concurrency is not None and concurrency < 1:  # 0 must not quietly mean "every core"
        raise LaunchError(f"--concurrency must be at least 1, not {concurrency}")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise LaunchError(f"unknown backend {unknown[0]!r}; known: {', '.join(BACKENDS)}")
    processes = concurrency if concurrency is not None else os.cpu_count() or 1
    compile_queues = [compile_queue(b) for b in dict.fromkeys(backends or BACKENDS)]
    queues = [*compile_queues, *(q for q in extra_queues if q not in compile_queues)]
    env = {"CUDA_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""}
    return WorkerPlan(None, None, queues, env, f"compile.{os.getpid()}@{socket.gethostname()}", processes)


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
            str(plan.concurrency),
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
