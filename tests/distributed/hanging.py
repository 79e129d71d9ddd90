"""A test-only backend (TUNEBASE_BACKEND_FACTORY=tests.distributed.hanging:make_backend).

It is the real host backend, except that a task whose shape name starts with 'Hang' never returns,
standing in for a harness or kernel that hangs; the watchdog must end it.
"""

from __future__ import annotations

import time
from pathlib import Path

from workers.backends.base import ProgressCallback, TaskResult, TaskSpec
from workers.backends.host import HostBackend


class HangingHostBackend(HostBackend):
    def run_task(self, spec: TaskSpec, progress: ProgressCallback | None = None) -> TaskResult:
        while spec.shape.startswith("Hang"):
            time.sleep(3600)
        return super().run_task(spec, progress)


def make_backend(artifact_dir: Path) -> HangingHostBackend:
    return HangingHostBackend(artifact_dir=artifact_dir)
