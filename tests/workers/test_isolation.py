"""The watchdog with real child processes: the resident child (reuse, timeout, crash, noise, recycling,
fork, parent death) and the per-call child, over the real host backend
(tests/workers/isolation_backend.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernels.packages.loader import builtin_packages
from tests.conftest import REPO
from workers.backends.base import TaskSpec
from workers.isolation import BackendRef, IsolatedBackend, IsolatedCallFailed, WatchdogTimeout

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

FACTORY = "tests.workers.isolation_backend:make_backend"
VARIANT = next(v.name for v in builtin_packages()["tb-decode"].space("host"))


def spec(shape: str) -> TaskSpec:
    return TaskSpec(
        arch="host", phase="decode", format="Q8_0", shape=shape, n=64, k=256, m=1,
        variants=(VARIANT,), min_dispatches=3, max_dispatches=3, warmup=1,
    )  # fmt: skip


def served(backend: IsolatedBackend, shape: str = "Probe") -> tuple[int, int]:
    """(pid, tasks run by that process's backend object) of one real task."""
    result = backend.run_task(spec(shape))
    assert result.results[0].parity is not None and result.results[0].parity.passed
    assert len(result.results[0].dispatches) == 3
    fields = dict(part.split("=") for part in result.device.name.split())
    return int(fields["pid"]), int(fields["tasks"])


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by its parent, counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, seconds: float = 15) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def resident(artifact_dir: Path) -> object:
    backend = IsolatedBackend(BackendRef("host", str(artifact_dir), FACTORY), timeout_s=60)
    yield backend
    backend.close()


def test_calls_share_one_resident_child_and_its_state(resident: IsolatedBackend) -> None:
    assert resident.detect() is not None
    pid = resident.child_pid
    assert pid is not None and alive(pid)
    assert served(resident) == (pid, 1)
    assert served(resident) == (pid, 2)  # the same process, the same backend object
    assert resident.supports("host", "decode", "Q8_0") is None
    assert resident.child_pid == pid
    resident.close()
    assert resident.child_pid is None and wait_gone(pid)


def test_a_hang_kills_the_whole_group_and_the_next_call_gets_a_new_child(
    artifact_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "grandchild.pid"
    monkeypatch.setenv("TB_TEST_GRANDCHILD_PIDFILE", str(pidfile))
    backend = IsolatedBackend(BackendRef("host", str(artifact_dir), FACTORY), timeout_s=20)
    try:
        first, _ = served(backend)  # warm: the compile cache is filled before the short timeout
        backend.timeout_s = 3
        started = time.monotonic()
        with pytest.raises(WatchdogTimeout, match=r"watchdog: host run_task ran past 3 s and was killed"):
            backend.run_task(spec("Hang_Forever"))
        assert 3 <= time.monotonic() - started < 15
        grandchild = int(pidfile.read_text())
        assert wait_gone(first) and wait_gone(grandchild)  # the child and what it started
        assert backend.child_pid is None
        second, tasks = served(backend)
        assert second != first and tasks == 1  # a fresh child, fresh state
    finally:
        backend.close()


def test_a_child_that_dies_mid_call_fails_the_call_with_its_output(resident: IsolatedBackend) -> None:
    first, _ = served(resident)
    with pytest.raises(
        IsolatedCallFailed, match=r"host run_task child exited -?7: .*harness: about to crash"
    ):
        resident.run_task(spec("Crash_Now"))
    assert wait_gone(first)
    second, tasks = served(resident)
    assert second != first and tasks == 1


def test_a_python_error_keeps_the_child(resident: IsolatedBackend) -> None:
    first, _ = served(resident)
    with pytest.raises(IsolatedCallFailed, match=r"ValueError: bad shape Raise_It"):
        resident.run_task(spec("Raise_It"))
    assert served(resident) == (first, 3)  # the raising task counted: same object


def test_what_the_backend_prints_does_not_break_the_protocol(resident: IsolatedBackend) -> None:
    first, _ = served(resident, "Noisy_1")
    assert served(resident, "Noisy_2") == (first, 2)
    assert served(resident) == (first, 3)


def test_a_child_killed_between_calls_is_replaced(resident: IsolatedBackend) -> None:
    first, _ = served(resident)
    os.kill(first, signal.SIGKILL)
    assert wait_gone(first)
    second, tasks = served(resident)
    assert second != first and tasks == 1


def test_recycling_after_n_calls_and_above_an_rss_limit(artifact_dir: Path) -> None:
    ref = BackendRef("host", str(artifact_dir), FACTORY)
    by_calls = IsolatedBackend(ref, timeout_s=60, recycle_calls=2)
    try:
        first, _ = served(by_calls)
        assert served(by_calls) == (first, 2)
        assert by_calls.child_pid is None and wait_gone(first)  # replaced after its 2nd call
        second, tasks = served(by_calls)
        assert second != first and tasks == 1
    finally:
        by_calls.close()
    by_rss = IsolatedBackend(ref, timeout_s=60, max_rss_mb=1)  # any python is bigger
    try:
        first, _ = served(by_rss)
        assert by_rss.child_pid is None and wait_gone(first)
    finally:
        by_rss.close()


FORK_SCRIPT = """
import multiprocessing, sys
from tests.workers.test_isolation import served
from workers.isolation import BackendRef, IsolatedBackend

def in_fork(backend, queue):
    pid, _ = served(backend)
    queue.put((pid, backend.child_pid))
    backend.close()

backend = IsolatedBackend(BackendRef("host", sys.argv[1], sys.argv[2]), 60)
parent_child, _ = served(backend)
context = multiprocessing.get_context("fork")
queue = context.Queue()
process = context.Process(target=in_fork, args=(backend, queue))
process.start()
fork_child, seen = queue.get(timeout=100)
process.join(30)
print(parent_child, fork_child, seen, process.exitcode, *served(backend))
backend.close()
"""


def test_a_forked_process_starts_its_own_child(artifact_dir: Path) -> None:
    # forked from a fresh interpreter: pytest's own process holds threads (servers, clients of earlier
    # tests) whose locks a fork may copy held, which hung this test once in a full run
    done = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, str(artifact_dir), FACTORY],
        cwd=REPO, capture_output=True, text=True, timeout=200, check=True,
    )  # fmt: skip
    parent_child, fork_child, seen, exitcode, again, tasks = map(int, done.stdout.split())
    assert exitcode == 0
    assert fork_child != parent_child and seen == fork_child
    assert (again, tasks) == (parent_child, 2)  # the parent's child was left alone


def test_the_child_exits_when_its_parent_dies(artifact_dir: Path) -> None:
    script = (
        "import os, sys\n"
        "from workers.isolation import BackendRef, IsolatedBackend\n"
        f"b = IsolatedBackend(BackendRef('host', {str(artifact_dir)!r}, {FACTORY!r}), 60)\n"
        "b.detect()\n"
        "print(b.child_pid, flush=True)\n"
        "os._exit(0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    orphan = int(done.stdout.strip())
    assert wait_gone(orphan, 20)  # EOF on its request pipe


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_child_dies_with_its_parent_even_mid_call(artifact_dir: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    script = (
        "import os, sys\n"
        "from tests.workers.test_isolation import spec\n"
        "from workers.isolation import BackendRef, IsolatedBackend\n"
        f"b = IsolatedBackend(BackendRef('host', {str(artifact_dir)!r}, {FACTORY!r}), 600)\n"
        "b.detect()\n"
        "print(b.child_pid, flush=True)\n"
        "b.run_task(spec('Hang_Forever'))\n"
    )
    env = {**os.environ, "TB_TEST_GRANDCHILD_PIDFILE": str(pidfile)}
    parent = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    orphan = 0
    try:
        assert parent.stdout is not None
        orphan = int(parent.stdout.readline())
        deadline = time.monotonic() + 60
        while not pidfile.exists():  # the child is inside the hanging call
            assert time.monotonic() < deadline
            time.sleep(0.05)
        parent.kill()
        parent.wait(timeout=30)
        assert wait_gone(orphan, 20)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=30)
        if orphan:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(orphan, signal.SIGKILL)  # its grandchild (the sleep) is left to us


def test_the_per_call_mode_still_works(
    artifact_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TB_TEST_GRANDCHILD_PIDFILE", str(tmp_path / "grandchild.pid"))
    backend = IsolatedBackend(BackendRef("host", str(artifact_dir), FACTORY), timeout_s=30, mode="per-call")
    first, tasks = served(backend)
    second, again = served(backend, "Noisy_1")
    assert first != second and tasks == again == 1  # a fresh process, fresh state, every call
    assert backend.child_pid is None
    with pytest.raises(IsolatedCallFailed, match=r"child exited 7: .*harness: about to crash"):
        backend.run_task(spec("Crash_Now"))
    with pytest.raises(IsolatedCallFailed, match=r"ValueError: bad shape Raise_It"):
        backend.run_task(spec("Raise_It"))
    backend.timeout_s = 3
    with pytest.raises(WatchdogTimeout, match=r"watchdog: host run_task ran past 3 s and was killed"):
        backend.run_task(spec("Hang_Forever"))
    assert wait_gone(int((tmp_path / "grandchild.pid").read_text()))


def test_an_unknown_mode_is_refused(artifact_dir: Path) -> None:
    with pytest.raises(ValueError, match="task_isolation 'forked' is not one of resident, per-call"):
        IsolatedBackend(BackendRef("host", str(artifact_dir)), 60, mode="forked")  # type: ignore[arg-type]


def test_settings_choose_the_mode_and_recycling(artifact_dir: Path) -> None:
    from service.config import Settings
    from workers.tasks import build_backend

    settings = Settings(artifact_dir=artifact_dir, task_isolation="per-call", task_isolation_recycle_calls=5)
    backend = build_backend(settings, "host")
    assert isinstance(backend, IsolatedBackend)
    assert (backend.mode, backend.recycle_calls, backend.max_rss_mb) == ("per-call", 5, 8192)
    default = build_backend(Settings(artifact_dir=artifact_dir), "host")
    assert isinstance(default, IsolatedBackend) and default.mode == "resident"
