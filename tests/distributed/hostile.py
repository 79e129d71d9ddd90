"""A test-only backend (TUNEBASE_BACKEND_FACTORY=tests.distributed.hostile:make_backend).

The real host backend, whose results turn hostile by shape name, standing in for a harness that
prints a NUL byte in its error text ('Nul*') or a backend bug that reports one variant twice
('Twice*'): results the database refuses, exactly as they would arrive from a real worker.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from workers.backends.base import ProgressCallback, TaskResult, TaskSpec
from workers.backends.host import HostBackend


class HostileHostBackend(HostBackend):
    def run_task(self, spec: TaskSpec, progress: ProgressCallback | None = None) -> TaskResult:
        result = super().run_task(spec, progress)
        first = result.results[0]
        if spec.shape.startswith("Nul"):
            hostile = dataclasses.replace(first, error="harness said: bad\x00byte \udcff here")
            return dataclasses.replace(result, results=[hostile, *result.results[1:]])
        if spec.shape.startswith("Twice"):
            return dataclasses.replace(result, results=[*result.results, first])
        return result


def make_backend(artifact_dir: Path) -> HostileHostBackend:
    return HostileHostBackend(artifact_dir=artifact_dir)
