"""A compose project per test for the `compose` tests (`make compose-test`), torn down afterwards."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

import pytest

from tests.conftest import REPO, free_port
from tests.deploy.compose_harness import Compose, HealthRunner, docker_api


@contextlib.contextmanager
def deployment(name: str, profiles: list[str]) -> Iterator[Compose]:
    """docker-compose.yml, plus the no-registry override unless TUNEBASE_COMPOSE_BASE=registry."""
    if shutil.which("docker-compose") is None:
        pytest.fail("docker-compose is not installed: scripts/container-engine.sh installs it")
    env = {
        "DOCKER_BUILDKIT": "0",  # docker-compose 1.29's classic builder: podman's API has no BuildKit
        "COMPOSE_DOCKER_CLI_BUILD": "0",
        "TUNEBASE_API_PORT": f"127.0.0.1:{free_port()}",  # 8000 may be taken; loopback only
    }
    files = ["docker-compose.yml"]
    if os.environ.get("TUNEBASE_COMPOSE_BASE", "local") == "local":
        files.append("docker-compose.no-registry.yml")
        base = os.environ.get("TUNEBASE_BASE_IMAGE", "localhost/debian:bookworm")
        env["TUNEBASE_BASE_IMAGE"] = env["TUNEBASE_ROCM_BASE_IMAGE"] = base
    project = f"tb{name}{os.getpid()}"
    with docker_api() as engine:
        env["DOCKER_HOST"] = engine.docker_host
        compose = Compose(REPO, files, project, profiles, env, REPO / "var" / "compose-test", engine.cli)
        runner = HealthRunner(project) if engine.needs_health_runner else contextlib.nullcontext()
        with runner:
            try:
                yield compose
            finally:
                compose.run("down", "-v", "--remove-orphans", "--timeout", "20", timeout=300, check=False)


@pytest.fixture
def compose() -> Iterator[Compose]:
    """The CPU deployment: postgres, redis, migrate, api, beat, maintenance and the host worker."""
    with deployment("ct", ["host"]) as project:
        yield project


@pytest.fixture
def compose_gpu() -> Iterator[Compose]:
    """The GPU worker services (profiles rocm and cuda), for building their images only."""
    with deployment("gpu", ["rocm", "cuda"]) as project:
        yield project
