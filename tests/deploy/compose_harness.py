"""docker-compose against Docker or Podman, for the compose test (tests/deploy/test_compose_up.py).

Podman has no daemon: `podman system service` serves the Docker API that docker-compose 1.29 speaks, so the
project's compose file runs unchanged (profiles, depends_on conditions). Without systemd, podman runs no
health checks by itself (it schedules them with systemd timers), so HealthRunner does what the timer would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


class ComposeError(RuntimeError):
    """A compose or engine command failed; the message carries its output."""


def _ping(sock_path: str) -> bool:
    """GET /_ping on a Docker API unix socket."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(sock_path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: localhost\r\n\r\n")
            return b" 200 " in sock.recv(256)
    except OSError:
        return False


@dataclass
class Engine:
    """Where docker-compose sends its API calls, and the CLI that talks to the same engine."""

    docker_host: str
    cli: str  # "docker" or "podman"
    needs_health_runner: bool


@contextlib.contextmanager
def docker_api() -> Iterator[Engine]:
    """Use DOCKER_HOST or a running Docker daemon; else serve podman's Docker API for the duration."""
    no_systemd = not Path("/run/systemd/system").exists()
    if os.environ.get("DOCKER_HOST"):
        cli = "docker" if shutil.which("docker") else "podman"
        yield Engine(os.environ["DOCKER_HOST"], cli, needs_health_runner=cli == "podman" and no_systemd)
        return
    if Path("/var/run/docker.sock").exists() and _ping("/var/run/docker.sock"):
        yield Engine("unix:///var/run/docker.sock", "docker", needs_health_runner=False)
        return
    podman = shutil.which("podman")
    if podman is None:
        raise ComposeError("no Docker daemon and no podman (scripts/container-engine.sh installs podman)")
    workdir = tempfile.mkdtemp(prefix="tb-podman-")
    sock_path = os.path.join(workdir, "podman.sock")
    log = open(os.path.join(workdir, "service.log"), "wb")  # noqa: SIM115 (closed below)
    service = subprocess.Popen(
        [podman, "system", "service", "--time=0", f"unix://{sock_path}"], stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 60
        while not _ping(sock_path):
            if service.poll() is not None or time.monotonic() > deadline:
                raise ComposeError(f"podman system service did not start: {Path(log.name).read_text()}")
            time.sleep(0.2)
        yield Engine(f"unix://{sock_path}", "podman", needs_health_runner=no_systemd)
    finally:
        service.terminate()
        try:
            service.wait(timeout=30)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait(timeout=30)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


class HealthRunner:
    """Run each health check of one compose project every few seconds (podman without systemd)."""

    def __init__(self, project: str, every: float = 3.0):
        self.project = project
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="health-runner", daemon=True)

    def __enter__(self) -> HealthRunner:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def _loop(self) -> None:
        label = f"label=com.docker.compose.project={self.project}"
        while not self._stop.is_set():
            listed = subprocess.run(
                ["podman", "ps", "--filter", label, "--format", "{{.ID}} {{.Status}}"],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            for line in listed.stdout.splitlines():
                ident, _, status = line.partition(" ")
                if "(" in status:  # "(starting)", "(healthy)", "(unhealthy)": it has a health check
                    subprocess.run(
                        ["podman", "healthcheck", "run", ident], capture_output=True, timeout=120, check=False
                    )
            self._stop.wait(self.every)


@dataclass
class Compose:
    """One compose project: the files, the environment that fills their ${VARIABLES}, and its commands."""

    directory: Path
    files: list[str]
    project: str
    profiles: list[str]
    env: dict[str, str]
    log_dir: Path
    engine_cli: str  # "docker" or "podman": the CLI for what compose does not show (networks, images)
    timings: dict[str, float] = field(default_factory=dict)

    def argv(self, *args: str) -> list[str]:
        tool = shutil.which("docker-compose") or "docker-compose"
        files = [arg for name in self.files for arg in ("-f", name)]
        profiles = [arg for name in self.profiles for arg in ("--profile", name)]
        head = [tool, "--project-directory", str(self.directory), "-p", self.project]
        return [*head, *files, *profiles, *args]

    def run(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.argv(*args), capture_output=True, text=True, timeout=timeout, check=False,
            cwd=self.directory, env={**os.environ, **self.env},
        )  # fmt: skip
        if check and proc.returncode != 0:
            command = " ".join(args)
            raise ComposeError(f"docker-compose {command} exited {proc.returncode}:\n{proc.stderr[-6000:]}")
        return proc

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        yield
        self.timings[name] = round(time.monotonic() - start, 1)

    def container_ids(self, service: str | None = None) -> list[str]:
        """Containers of this project (all states), from the compose labels."""
        return self.run(*(["ps", "-a", "-q"] + ([service] if service else [])), timeout=120).stdout.split()

    def state(self, service: str) -> str:
        """`Up (healthy)`, `Exit 0`, ... as `docker-compose ps` shows it (empty without a container)."""
        lines = self.run("ps", service, timeout=120).stdout.splitlines()
        rows = [line for line in lines[2:] if line.strip()]  # header, dashes
        return rows[0] if rows else ""

    def save_logs(self) -> Path:
        """Every service's log in one file under log_dir; returns its path."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"{self.project}.log"
        proc = self.run("logs", "--no-color", "--timestamps", timeout=300, check=False)
        path.write_text(proc.stdout + proc.stderr)
        return path
