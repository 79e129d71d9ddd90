"""The watchdog: a backend's calls run in a child process with a timeout.

A kernel or harness that hangs (a GPU kernel that never returns, a deadlocked driver call)
cannot be interrupted from a thread, so calls run in a `python -m workers.isolation` child in its
own process group; past the timeout the whole group is killed and the call raises WatchdogTimeout,
which fails the task with that reason while the worker goes on. A fresh exec (not fork) also keeps
GPU runtimes out of the Celery pool process.

Two modes (setting `task_isolation`):
- "resident" (default): one long-lived child per worker process serves call after call, so the
  backend (its CUDA context, loaded modules, CUPTI session, compiled-library handles) is built once,
  not per task. Requests and replies are length-prefixed pickles on two dedicated pipes; the child's
  fd 1 and 2 go to a log file, so whatever a backend or compiler prints cannot corrupt a reply. A
  timeout or a crash ends that child; the next call starts a fresh one. The child is also replaced
  after `recycle_calls` calls, above `max_rss_mb`, or when its backend says it is not reusable
  (e.g. a CUDA context with a sticky error). It exits at EOF on its request pipe, and on Linux is
  SIGKILLed when the worker process dies, even mid-call (PR_SET_PDEATHSIG).
- "per-call": a fresh child per call (the first design; every call pays start-up and device init).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from workers.backends.base import Backend, DeviceInfo, ProgressCallback, TaskResult, TaskSpec
from workers.backends.registry import create_backend

PROBE_TIMEOUT_S = 120.0
IsolationMode = Literal["resident", "per-call"]
ISOLATION_MODES: tuple[str, ...] = ("resident", "per-call")
DEFAULT_RECYCLE_CALLS = 200
DEFAULT_MAX_RSS_MB = 8192
TAIL_BYTES = 2000
_HEADER = struct.Struct(">Q")
_STOP_WAIT_S = 10.0  # a child asked to stop (EOF) gets this long to close its backend before SIGKILL
_POLL_S = 0.5  # while waiting for a reply, how often to check that the child is still alive


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


class _Resident:
    """One running resident child, from the parent's side: its process, pipes and log file."""

    def __init__(self, process: subprocess.Popen[bytes], request_fd: int, reply_fd: int, log_fd: int):
        self.process = process
        self.request_fd = request_fd
        self.reply_fd = reply_fd
        self.log_fd = log_fd
        self.owner_pid = os.getpid()  # a forked copy of this object belongs to another process
        self.calls = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def tail(self) -> str:
        """The end of what the child printed during the current call (the log is emptied per call)."""
        with contextlib.suppress(OSError):
            size = os.fstat(self.log_fd).st_size
            return os.pread(self.log_fd, TAIL_BYTES, max(0, size - TAIL_BYTES)).decode(errors="replace")
        return ""

    def close_fds(self) -> None:
        """Close each of our fds once (a second close could hit a number another thread reopened)."""
        self.close_requests()
        for fd in (self.reply_fd, self.log_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.reply_fd = self.log_fd = -1

    def close_requests(self) -> None:
        """EOF for the child: it closes its backend and exits."""
        if self.request_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.request_fd)
            self.request_fd = -1

    def kill(self, keep_fds: bool = False) -> None:
        """SIGKILL the child's whole process group (its compilers, grandchildren), then reap it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)
        if not keep_fds:
            self.close_fds()

    def stop(self) -> None:
        """Ask the child to exit (EOF on its request pipe: it closes its backend); kill it if it lingers."""
        self.close_requests()
        try:
            self.process.wait(timeout=_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.kill()
        self.close_fds()


class IsolatedBackend:
    """A Backend whose calls run in a child process under a watchdog timeout (0 = no timeout).

    `mode` "resident" keeps one child across calls (replaced after `recycle_calls` calls, 0 = never,
    or when its RSS passes `max_rss_mb`, 0 = no limit); "per-call" starts a fresh child per call.
    Calls are serialised (one lock): a worker runs one task at a time anyway.
    """

    def __init__(
        self,
        ref: BackendRef,
        timeout_s: float,
        mode: IsolationMode = "resident",
        recycle_calls: int = DEFAULT_RECYCLE_CALLS,
        max_rss_mb: int = DEFAULT_MAX_RSS_MB,
    ):
        if mode not in ISOLATION_MODES:
            raise ValueError(f"task_isolation {mode!r} is not one of {', '.join(ISOLATION_MODES)}")
        self.ref = ref
        self.name = ref.name
        self.timeout_s = timeout_s
        self.mode = mode
        self.recycle_calls = recycle_calls
        self.max_rss_mb = max_rss_mb
        self._resident: _Resident | None = None
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()

    def detect(self) -> DeviceInfo | None:
        return cast(DeviceInfo | None, self._call("detect", (), PROBE_TIMEOUT_S))

    def supports(self, arch: str, phase: str, format_name: str) -> str | None:
        return cast(str | None, self._call("supports", (arch, phase, format_name), PROBE_TIMEOUT_S))

    def run_task(self, spec: TaskSpec, progress: ProgressCallback | None = None) -> TaskResult:
        timeout = self.timeout_s if self.timeout_s > 0 else None
        return cast(TaskResult, self._call("run_task", (spec,), timeout))

    @property
    def child_pid(self) -> int | None:
        """The resident child's pid (None when none runs): lets tests and logs see reuse."""
        resident = self._resident
        return resident.pid if resident is not None and resident.owner_pid == os.getpid() else None

    def close(self) -> None:
        """Stop the resident child, if any (worker shutdown); the next call would start a new one."""
        with self._locked():
            self._drop_foreign()
            if self._resident is not None:
                resident, self._resident = self._resident, None
                resident.stop()

    def _call(self, op: str, args: tuple[Any, ...], timeout: float | None) -> Any:
        if self.mode == "per-call":
            return self._call_per_call(op, args, timeout)
        with self._locked():
            return self._call_resident(op, args, timeout)

    @contextlib.contextmanager
    def _locked(self) -> Any:
        if self._lock_pid != os.getpid():  # forked: the parent's lock may have been held at fork time
            self._lock, self._lock_pid = threading.Lock(), os.getpid()
        with self._lock:
            yield

    # -- resident child -------------------------------------------------------------------

    def _drop_foreign(self) -> None:
        """A child inherited through fork belongs to the parent: close our copies, never reuse it."""
        resident = self._resident
        if resident is not None and resident.owner_pid != os.getpid():
            resident.close_fds()
            self._resident = None

    def _spawn(self) -> _Resident:
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        fd, path = tempfile.mkstemp(prefix="tunebase-isolation-", suffix=".log")
        os.unlink(path)  # nothing to clean up however the parent ends
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        serve_args = [str(request_read), str(reply_write), str(os.getpid())]
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "workers.isolation", "--serve", *serve_args],
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                pass_fds=(request_read, reply_write),
                env={**os.environ, "PYTHONUNBUFFERED": "1"},  # prints reach the log before a crash
                start_new_session=True,  # its own process group: compilers it starts die with it
            )
        except BaseException:
            for end in (request_read, request_write, reply_read, reply_write, fd):
                os.close(end)
            raise
        os.close(request_read)
        os.close(reply_write)
        return _Resident(process, request_write, reply_read, fd)

    def _call_resident(self, op: str, args: tuple[Any, ...], timeout: float | None) -> Any:
        self._drop_foreign()
        deadline = None if timeout is None else time.monotonic() + timeout
        request = pickle.dumps((self.ref, op, args), protocol=pickle.HIGHEST_PROTOCOL)
        resident = self._resident
        if resident is not None and _exited(resident.process):  # died between calls
            resident.kill()
            resident = self._resident = None
        if resident is None:
            resident = self._resident = self._spawn()
        os.ftruncate(resident.log_fd, 0)  # the tail we report is this call's output
        try:
            try:
                _write_frame(resident.request_fd, request)
            except BrokenPipeError:  # it died just now, before reading anything: the request never ran
                resident.kill()
                resident = self._resident = self._spawn()
                _write_frame(resident.request_fd, request)
            resident.calls += 1
            payload = _read_frame(resident.reply_fd, deadline, resident.process)
        except TimeoutError:
            self._resident = None
            resident.kill()
            raise WatchdogTimeout(
                f"watchdog: {self.name} {op} ran past {timeout:g} s and was killed"
            ) from None
        except BaseException:  # interrupted mid-exchange (a signal, a soft time limit): its reply would
            self._resident = None  # be read as the next call's, so this child cannot be reused
            resident.kill()
            raise
        if payload is None:  # EOF: the child died mid-call (segfault, os._exit, OOM kill)
            self._resident = None
            resident.kill(keep_fds=True)
            tail = resident.tail()
            resident.close_fds()
            raise IsolatedCallFailed(f"{self.name} {op} child exited {resident.process.returncode}: {tail}")
        status, value, health = pickle.loads(payload)
        if self._should_recycle(resident, health):
            self._resident = None
            resident.stop()
        if status != "ok":
            raise IsolatedCallFailed(value)
        return value

    def _should_recycle(self, resident: _Resident, health: dict[str, Any]) -> bool:
        if not health.get("reusable", True):
            return True
        if self.recycle_calls and resident.calls >= self.recycle_calls:
            return True
        rss = int(health.get("rss_bytes", 0))
        return bool(self.max_rss_mb) and rss > self.max_rss_mb * (1 << 20)

    # -- a fresh child per call -----------------------------------------------------------

    def _call_per_call(self, op: str, args: tuple[Any, ...], timeout: float | None) -> Any:
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
                tail = output.decode(errors="replace")[-TAIL_BYTES:]
                raise IsolatedCallFailed(f"{self.name} {op} child exited {process.returncode}: {tail}")
            status, value = pickle.loads(answer.read_bytes())
        if status != "ok":
            raise IsolatedCallFailed(value)
        return value


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


# -- framing ------------------------------------------------------------------------------


def _write_frame(fd: int, payload: bytes) -> None:
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _read_exact(fd: int, size: int) -> bytes | None:
    """Blocking read of exactly `size` bytes; None at EOF (the other side is gone)."""
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int, deadline: float | None, process: subprocess.Popen[bytes]) -> bytes | None:
    """One reply frame, or None when the child dies first; TimeoutError past the deadline.

    The child's reply end is not inherited by what it starts, so its death is EOF here; polling the
    process too covers a grandchild that forked (no exec) and kept the pipe open."""
    buffer = bytearray()
    need = _HEADER.size
    header_done = False
    while True:
        if len(buffer) >= need:
            if header_done:
                return bytes(buffer[_HEADER.size : need])
            need = _HEADER.size + _HEADER.unpack_from(buffer)[0]
            header_done = True
            continue
        wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
        if wait <= 0:
            raise TimeoutError
        ready, _, _ = select.select([fd], [], [], wait)
        if ready:
            chunk = os.read(fd, max(1 << 16, need - len(buffer)))
            if not chunk:
                return None
            buffer += chunk
        elif _exited(process):
            return None


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the child has exited, without reaping it: until reaped its pid (so its process group
    id) cannot be reused, so the group kill that follows cannot hit a stranger."""
    if process.returncode is not None:
        return True
    if not hasattr(os, "waitid"):  # not Linux: reap (the tiny pid-reuse window is accepted there)
        return process.poll() is not None
    try:
        info = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return process.poll() is not None
    return info is not None or _zombie(process.pid)


def _zombie(pid: int) -> bool:
    """A killed multi-threaded child shows as a zombie before waitid reports it (its other threads are
    still being torn down); it has exited all the same and its pid stays reserved until reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("Z", "X")


# -- the child ------------------------------------------------------------------------------


def _child() -> None:
    """Per-call mode: one request on stdin, the answer in the file the request names."""
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


def _rss_bytes() -> int:
    try:
        resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB (peak, not current)


def _reusable(backend: Backend | None) -> bool:
    """The backend's own say (optional `reusable()`, e.g. False for a CUDA context with a sticky
    error) on whether later calls may share this process; a failing check counts as no."""
    check = getattr(backend, "reusable", None)
    if not callable(check):
        return True
    try:
        return bool(check())
    except Exception:
        return False


def _exit_with_parent(parent_pid: int) -> None:
    """Linux: SIGKILL this child when its parent dies even mid-call (a hung kernel would otherwise keep
    the GPU from the worker that replaces it); elsewhere EOF after the call has to do."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before the request above took effect
        os._exit(1)


def _serve(request_fd: int, reply_fd: int) -> None:
    """Resident mode: answer requests until EOF (the parent closed the pipe, or died), then close."""
    os.set_inheritable(request_fd, False)  # what this child starts must not hold the protocol's pipes
    os.set_inheritable(reply_fd, False)
    backends: dict[BackendRef, Backend] = {}
    try:
        while True:
            header = _read_exact(request_fd, _HEADER.size)
            if header is None:
                return
            body = _read_exact(request_fd, _HEADER.unpack(header)[0])
            if body is None:
                return
            backend: Backend | None = None
            try:
                ref, op, args = pickle.loads(body)
                backend = backends.get(ref)
                if backend is None:
                    backend = backends[ref] = load_backend(ref.name, Path(ref.artifact_dir), ref.factory)
                reply: tuple[str, Any] = ("ok", getattr(backend, op)(*args))
            except Exception as error:
                reply = ("error", f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=5)}")
            health = {"pid": os.getpid(), "rss_bytes": _rss_bytes(), "reusable": _reusable(backend)}
            try:
                payload = pickle.dumps((*reply, health), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as error:  # an answer that cannot travel is the call's error, not a crash
                text = f"reply of {reply[0]!r} could not be pickled: {type(error).__name__}: {error}"
                payload = pickle.dumps(("error", text, health), protocol=pickle.HIGHEST_PROTOCOL)
            try:
                _write_frame(reply_fd, payload)
            except BrokenPipeError:  # the parent is gone
                return
    finally:
        for backend in backends.values():
            close = getattr(backend, "close", None)
            if callable(close):
                with contextlib.suppress(Exception):
                    close()


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        _exit_with_parent(int(sys.argv[4]))
        _serve(int(sys.argv[2]), int(sys.argv[3]))
    else:
        _child()
