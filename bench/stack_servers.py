"""Postgres and Redis for a stack run, started from carried files where nothing can be installed.

The device machine has no network and no apt: scripts/fetch-device-servers.sh puts Debian's Redis packages
(``.srv/debs``, unpacked here with ``dpkg -x``) and the pgserver wheel (``.srv/wheels``: a relocatable
Postgres 16 build; only its ``initdb``/``postgres`` binaries are used) into ``.srv``. Both servers listen on
127.0.0.1 only, keep their data under one work folder and are stopped by ``Servers.stop``. Postgres refuses
to run as root, so as root it runs as ``nobody`` (its data folder is handed to that user).
Used by bench/stack_run.py; also works on any x86-64 Linux host with those files.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 60.0
TOOL_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before it listened on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout:g} s")


@dataclass
class Servers:
    """The started servers: URLs to reach them, processes to stop, log files to keep."""

    postgres_url: str  # the maintenance database ("postgres"); callers create their own
    redis_url: str  # without a DB number
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        for name, process in reversed(self.processes):
            if process.poll() is None:  # postgres: SIGINT is the fast shutdown (SIGTERM waits for clients)
                process.send_signal(signal.SIGINT if name == "postgres" else signal.SIGTERM)
        for _, process in reversed(self.processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)


def unpack_debs(debs: list[Path], root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True, timeout=TOOL_TIMEOUT_S)


def start_redis(srv: Path, work: Path, port: int) -> tuple[subprocess.Popen[bytes], Path, str]:
    """redis-server from the carried .debs: no persistence, loopback only."""
    root = work / "redis-root"
    unpack_debs(sorted((srv / "debs").glob("*.deb")), root)
    binary = root / "usr/bin/redis-server"
    if not binary.exists():  # redis-server is a link to the multi-call redis-check-rdb of redis-tools
        binary.symlink_to("redis-check-rdb")
    env = {**os.environ, "LD_LIBRARY_PATH": str(root / "usr/lib/x86_64-linux-gnu")}
    if _missing_libraries(binary, env):  # e.g. libatomic.so.1: the fallback packages, searched last
        spare = work / "redis-fallback"
        unpack_debs(sorted((srv / "debs-fallback").glob("*.deb")), spare)
        env["LD_LIBRARY_PATH"] += os.pathsep + str(spare / "usr/lib/x86_64-linux-gnu")
        still = _missing_libraries(binary, env)
        if still:
            raise RuntimeError(f"redis-server needs libraries this system lacks: {', '.join(still)}")
    version = subprocess.run(
        [str(binary), "--version"], env=env, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
        check=True,
    ).stdout.strip()  # fmt: skip
    log = work / "redis.log"
    data = work / "redis-data"
    data.mkdir(exist_ok=True)
    argv = [
        str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", str(data), "--daemonize", "no", "--logfile", str(log),
    ]  # fmt: skip
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    wait_for_port(port, process, "redis-server", START_TIMEOUT_S)
    return process, log, version


def _missing_libraries(binary: Path, env: dict[str, str]) -> list[str]:
    """Shared libraries ldd cannot resolve for ``binary`` under ``env``."""
    out = subprocess.run(["ldd", str(binary)], env=env, capture_output=True, text=True,
                         timeout=TOOL_TIMEOUT_S, check=False).stdout  # fmt: skip
    return [line.split()[0] for line in out.splitlines() if "not found" in line]


def _pg_user() -> tuple[int, int, dict[str, str]] | None:
    """Postgres will not run as root: run it as nobody then; None when we are not root."""
    if os.geteuid() != 0:
        return None
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid, {"HOME": "/tmp", "USER": "nobody", "LOGNAME": "nobody"}


def _extract_wheel(wheel: Path, dest: Path) -> None:
    """Unzip keeping the executable bits (zipfile drops them)."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            path = Path(archive.extract(info, dest))
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                path.chmod(mode)


def start_postgres(srv: Path, work: Path, port: int) -> tuple[subprocess.Popen[bytes], Path, str]:
    """initdb + postgres from the pgserver wheel: trust auth on 127.0.0.1, durability off (a bench)."""
    wheels = sorted((srv / "wheels").glob("pgserver-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"no pgserver wheel under {srv / 'wheels'} (scripts/fetch-device-servers.sh)")
    pg_root = work / "pg"
    _extract_wheel(wheels[0], pg_root)
    bin_dir = pg_root / "pgserver/pginstall/bin"
    data, sockets, log = work / "pgdata", work / "pgsock", work / "postgres.log"
    user = _pg_user()
    for folder in (data, sockets):
        folder.mkdir(exist_ok=True)
        if user is not None:
            os.chown(folder, user[0], user[1])
    if user is not None:  # nobody must reach the binaries and the data folder
        for folder in (work, *work.parents):
            with contextlib.suppress(PermissionError):
                folder.chmod(folder.stat().st_mode | 0o011)
    kwargs: dict[str, object] = {}
    env = dict(os.environ)
    if user is not None:
        kwargs = {"user": user[0], "group": user[1], "extra_groups": []}
        env.update(user[2])
    version = subprocess.run(
        [str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
        check=True,
    ).stdout.strip()  # fmt: skip
    init = subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
         "--locale=C", "--no-sync"],
        capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, env=env, cwd="/tmp", check=False, **kwargs,
    )  # type: ignore[call-overload]  # fmt: skip
    if init.returncode != 0:
        raise RuntimeError(f"initdb failed ({init.returncode}): {init.stderr[-2000:]}")
    argv = [
        str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sockets),
        "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "fsync=off",
        "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
    ]  # fmt: skip
    handle = log.open("wb")
    process = subprocess.Popen(  # type: ignore[call-overload]
        argv, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd="/tmp", **kwargs
    )
    wait_for_port(port, process, "postgres", START_TIMEOUT_S)
    return process, log, version


def start_carried(srv: Path, work: Path) -> Servers:
    """Both servers from ``srv`` (.srv), on free ports, data under ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    if shutil.which("dpkg") is None:
        raise RuntimeError("dpkg is needed to unpack the carried Redis packages")
    redis_port, pg_port = free_port(), free_port()
    servers = Servers(
        f"postgresql+psycopg://postgres@127.0.0.1:{pg_port}/postgres", f"redis://127.0.0.1:{redis_port}"
    )
    try:
        process, log, version = start_redis(srv, work, redis_port)
        servers.processes.append(("redis", process))
        servers.logs.append(log)
        servers.versions["redis"] = version
        process, log, version = start_postgres(srv, work, pg_port)
        servers.processes.append(("postgres", process))
        servers.logs.append(log)
        servers.versions["postgres"] = version
    except BaseException:
        servers.stop()
        raise
    return servers
