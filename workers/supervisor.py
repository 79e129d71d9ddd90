"""`tunebase workers`: one pinned worker process per GPU, restarted when it dies."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 30.0


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = 0.0
    backoff: float = field(default=1.0)


class Supervisor:
    """Starts each child, restarts one that exits (with backoff if it keeps dying), stops all on a signal."""

    def __init__(self, children: list[Child], poll_seconds: float = 1.0, echo: Callable[[str], None] = print):
        self.children = children
        self.poll = poll_seconds
        self.echo = echo
        self.stopping = False

    def start(self, child: Child) -> None:
        child.process = subprocess.Popen(child.argv)  # long-lived by design; stopped in stop_all
        child.started_at = time.monotonic()
        self.echo(f"started {child.name} pid={child.process.pid} (restarts {child.restarts})")

    def run(self, max_seconds: float | None = None) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        for child in self.children:
            self.start(child)
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        try:
            while not self.stopping and (deadline is None or time.monotonic() < deadline):
                time.sleep(self.poll)
                for child in self.children:
                    self.check(child)
        finally:
            self.stop_all()

    def check(self, child: Child) -> None:
        assert child.process is not None
        code = child.process.poll()
        if code is None or self.stopping:
            return
        lived = time.monotonic() - child.started_at
        child.backoff = 1.0 if lived > 60 else min(child.backoff * 2, 60.0)
        self.echo(f"{child.name} pid={child.process.pid} exited with {code}; restarting")
        time.sleep(min(child.backoff, 5.0) if lived < 5 else 0)
        child.restarts += 1
        self.start(child)

    def stop_all(self) -> None:
        self.stopping = True
        for child in self.children:
            if child.process is not None and child.process.poll() is None:
                child.process.terminate()
        for child in self.children:
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait(timeout=STOP_TIMEOUT_S)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True


def worker_argv(gpu: int | None, arch: str | None, queues: list[str]) -> list[str]:
    argv = [sys.executable, "-m", "service.cli", "worker"]
    if gpu is not None:
        argv += ["--gpu", str(gpu)]
    if arch:
        argv += ["--arch", arch]
    if queues:
        argv += ["--queues", ",".join(queues)]
    return argv


def host_children(
    gpus: list[tuple[int, str]], host: bool, maintenance: bool, precompile: str = "gpu"
) -> list[Child]:
    """The workers `tunebase workers` supervises: one per (GPU index, arch); a host-arch one when asked
    or when there is no GPU; with ``maintenance``, the maintenance worker and, unless Settings.precompile
    is 'off' (then no compile message is ever sent), a compile worker of one process per core."""
    children = [Child(f"gpu{index}:{arch}", worker_argv(index, arch, [])) for index, arch in gpus]
    if host or not gpus:
        children.append(Child("host", worker_argv(None, "host", [])))
    if maintenance:
        children.append(Child("maintenance", worker_argv(None, None, ["maintenance"])))
        if precompile != "off":
            children.append(Child("compile", [*worker_argv(None, None, []), "--compile"]))
    return children
