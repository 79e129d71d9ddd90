"""One compiler per cache key on a host: an exclusive ``flock`` on a lock file beside the artifact.

Workers of one host share the artifact directory (TUNEBASE_ARTIFACT_DIR): the compile worker and the GPU
workers may reach the same unit at once. The first takes the lock and compiles; the others wait, then
find the artifact and reuse it. ``flock`` locks belong to the open file and the kernel drops them when the
holder's last descriptor closes, which includes a SIGKILLed or crashed process: a lock file left on disk
never blocks anyone. Lock files are never deleted (unlinking a lock file another process is about to
lock is the classic race; an empty file per unit costs nothing).

A compiler killed mid-write (SIGKILL, OOM) never runs its cleanup, so its temporary file stays beside the
artifact. Temporaries are named ``<artifact name>.<random>.tmp`` (``temp_prefix``), and the next holder of
the unit's lock deletes those of its unit (``sweep_stale_temps``): while the lock is held no other writer of
that unit is alive on this host, so any such file is litter.
"""

from __future__ import annotations

import fcntl
import glob
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# A waiter gives up after this and compiles itself (writes are atomic, so two compiles are harmless):
# a wedged compiler must not wedge every worker of the host. The tb-decode unit takes ~70 s on the H200 host.
DEFAULT_WAIT_S = 900.0
POLL_S = 0.05


@contextmanager
def unit_lock(path: Path, wait_s: float = DEFAULT_WAIT_S) -> Iterator[float | None]:
    """Hold the lock on ``path`` (created when missing); yields the seconds waited, or None on timeout
    (the caller then proceeds unlocked)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        start = time.monotonic()
        waited: float | None = None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                waited = time.monotonic() - start
                break
            except BlockingIOError:
                if time.monotonic() - start >= wait_s:
                    break
                time.sleep(POLL_S)
        yield waited
    finally:
        os.close(fd)  # releases the lock


def is_locked(path: Path) -> bool:
    """Whether another open file holds the lock now (for tests and diagnostics)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def temp_prefix(final: Path) -> str:
    """``tempfile.mkstemp``'s prefix for a file that becomes ``final`` (what ``sweep_stale_temps`` finds)."""
    return f"{final.name}."


def sweep_stale_temps(*finals: Path) -> list[Path]:
    """Delete what a killed writer left for these artifacts; only while holding their unit lock."""
    removed: list[Path] = []
    for final in finals:
        for name in glob.glob(f"{glob.escape(temp_prefix(final))}*.tmp", root_dir=final.parent):
            stale = final.parent / name
            try:
                stale.unlink()
            except FileNotFoundError:
                continue
            removed.append(stale)
    return removed
