"""A test-only backend for the watchdog (BackendRef.factory = "tests.workers.isolation_backend:make_backend").

The real host backend, whose tasks turn hostile by shape name, standing in for what a GPU harness may do
in a long-lived watchdog child: 'Hang*' starts a grandchild (its pid written to $TB_TEST_GRANDCHILD_PIDFILE)
and never returns; 'Crash*' prints, then dies without a reply (os._exit, as a segfault would); 'Noisy*'
writes to fd 1 and 2 from Python, from C-level writes and from a subprocess, with bytes shaped like a
reply frame; 'Raise*' raises. Every answer names the serving pid and how many tasks this backend object
has run, so a test can see that the child, and the state in it, persist.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

from workers.backends.base import ProgressCallback, TaskResult, TaskSpec
from workers.backends.host import HostBackend


class ProbeHostBackend(HostBackend):
    def __init__(self, artifact_dir: Path) -> None:
        super().__init__(artifact_dir)
        self.tasks = 0  # lives as long as the process that built the backend

    def run_task(self, spec: TaskSpec, progress: ProgressCallback | None = None) -> TaskResult:
        self.tasks += 1
        if spec.shape.startswith("Hang"):
            sleeper = subprocess.Popen(["sleep", "3600"])  # a compiler the hung harness started
            Path(os.environ["TB_TEST_GRANDCHILD_PIDFILE"]).write_text(str(sleeper.pid))
            while True:
                time.sleep(3600)
        if spec.shape.startswith("Crash"):
            print("harness: about to crash", flush=True)
            os._exit(7)
        if spec.shape.startswith("Raise"):
            raise ValueError(f"bad shape {spec.shape}")
        if spec.shape.startswith("Noisy"):
            fake_frame = struct.pack(">Q", 12) + b"not a pickle"
            print("python stdout noise", flush=True)
            print("python stderr noise", file=sys.stderr, flush=True)
            os.write(1, fake_frame)
            os.write(2, fake_frame)
            subprocess.run(
                ["sh", "-c", "echo compiler stdout; echo compiler stderr >&2"], check=True, timeout=30
            )
        result = super().run_task(spec, progress)
        served = f"pid={os.getpid()} tasks={self.tasks}"
        return dataclasses.replace(result, device=dataclasses.replace(result.device, name=served))


def make_backend(artifact_dir: Path) -> ProbeHostBackend:
    return ProbeHostBackend(artifact_dir)
