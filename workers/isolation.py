"""The watchdog: a backend's calls run in a child process with a timeout.

A kernel or harness that hangs (a GPU kernel that never returns, a deadlocked driver call)
cannot be interrupted from a thread, so each call runs in a fresh `python -m workers.isolation`
child in its own process group; past the timeout the whole group is killed and the call raises
WatchdogTimeout, which fails the task with that reason while the worker goes on. A fresh exec
(not fork) also keeps GPU runtimes out of the Celery pool process.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from workers.backends.base import Backend, DeviceInfo, ProgressCallback, TaskResult, TaskSpec
from workers.backends.registry import create_backend

PROBE_TIMEOUT_S = 120.0


class WatchdogTimeout(RuntimeError):
    """The backend call ran past the watchdog's limit and was killed."""


class IsolatedCallFailed(RuntimeError):
    """The child raised, or died without an answer; the message carries its reason."""


def load_backend(name: str, artifact_dir: Path, factory: str = "") -> Backend:
    """The registry's backend by name, or `factory` ('module:callable(artifact_dir)') when set."""
    if factory:
        module_name, _, attribute = factory.partition(":")
        if not attribute:
            raise ValueError(f"backend factory {factory!r} is not 'module:callable'")
        maker = getattr(importlib.import_module(module_name), attribute)
        return cast(Backend, maker(artifact_dir))
    return create_backend(name, artifact_dir)


@dataclass(frozen=True)
class BackendRef:
    """Enough to rebuild the backend in a child process."""

    name: str
    artifact_dir: str
    factory: str = ""


class IsolatedBackend:
    """A Backend whose calls run in a child process under a watchdog timeout (0 = no timeout)."""

    def __init__(self, ref: BackendRef, timeout_s: float):
        self.ref = ref
        self.name = ref.name
        self.timeout_s = timeout_s

    def detect(self) -> DeviceInfo | None:
        return cast(DeviceInfo | None, self._call("detect", (), PROBE_TIMEOUT_S))

    def supports(self, arch: str, phase: str, format_name: str) -> str | None:
        return cast(str | None, self._call("supports", (arch, phase, format_name), PROBE_TIMEOUT_S))

    def run_task(self, spec: TaskSpec, progress: ProgressCallback | None = None) -> TaskResult:
        timeout = self.timeout_s if self.timeout_s > 0 else None
        return cast(TaskResult, self._call("run_task", (spec,), timeout))

    def _call(self, op: str, args: tuple[Any, ...], timeout: float | None) -> Any:
        with tempfile.TemporaryDirectory(prefix="tunebase-call-") as tmp:
            answer = Path(tmp) / "answer.pickle"
            request = pickle.dumps((self.ref, op, args, str(answer)))
            process = subprocess.Popen(
                [sys.executable, "-m", "workers.isolation"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: compilers it starts die with it
            )
            try:
                output, _ = process.communicate(request, timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(process)
                raise WatchdogTimeout(
                    f"watchdog: {self.name} {op} ran past {timeout:g} s and was killed"
                ) from None
            finally:
                if process.poll() is None:
                    _kill_group(process)
            if not answer.is_file():
                tail = output.decode(errors="replace")[-2000:]
                raise IsolatedCallFailed(f"{self.name} {op} child exited {process.returncode}: {tail}")
            status, value = pickle.loads(answer.read_bytes())
        if status != "ok":
            raise IsolatedCallFailed(value)
        return value


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _child() -> None:
    ref, op, args, answer = pickle.loads(sys.stdin.buffer.read())
    try:
        backend = load_backend(ref.name, Path(ref.artifact_dir), ref.factory)
        reply: tuple[str, Any] = ("ok", getattr(backend, op)(*args))
    except Exception as error:
        reply = ("error", f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=5)}")
    tmp = f"{answer}.tmp"
    with open(tmp, "wb") as handle:
        pickle.dump(reply, handle)
    os.replace(tmp, answer)


if __name__ == "__main__":
    _child()
