"""docker-compose.yml is valid (docker-compose config) and every service runs a command this project has.

This checks the wiring without a container engine; tests/deploy/test_compose_up.py (`make compose-test`)
builds the images and runs the deployment.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from service.cli import app as cli_app

REPO = Path(__file__).resolve().parents[2]
PROFILES = ["--profile", "rocm", "--profile", "cuda"]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.skip("docker-compose is not installed (scripts/ensure-system.sh installs it)")
    proc = subprocess.run(
        [tool, "--project-directory", str(REPO), "-f", str(REPO / "docker-compose.yml"), *PROFILES, "config"],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    config: dict[str, Any] = yaml.safe_load(proc.stdout)
    return config


def resolve_tunebase(args: list[str]) -> Any:
    """Walk the typer/click tree like the shell would and parse the options (raises on a bad one)."""
    command: Any = typer.main.get_command(cli_app)  # typer ships its own copy of click
    ctx = command.make_context("tunebase", list(args), resilient_parsing=False)
    while hasattr(command, "resolve_command"):
        pending = list(getattr(ctx, "_protected_args", [])) + list(ctx.args)
        name, sub, rest = command.resolve_command(ctx, pending)
        assert sub is not None, f"no sub-command {name}"
        command, ctx = sub, sub.make_context(name or "", rest, parent=ctx, resilient_parsing=False)
    return command


def usage_error(error: BaseException) -> bool:
    return any(cls.__name__ == "UsageError" for cls in type(error).__mro__)


def test_the_production_services_are_all_there(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"postgres", "redis", "migrate", "api", "beat", "maintenance"} <= set(services)
    assert "pgdata" in compose["volumes"]
    assert any("pgdata" in str(v) for v in services["postgres"]["volumes"])
    assert services["migrate"]["command"] == ["tunebase", "db", "upgrade"]
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_each_gpu_worker_is_pinned_to_its_own_device(compose: dict[str, Any]) -> None:
    workers = {name: s for name, s in compose["services"].items() if name.startswith("worker-")}
    assert len(workers) >= 2
    rocm = {n: s for n, s in workers.items() if "rocm" in s["image"]}
    cuda = {n: s for n, s in workers.items() if "cuda" in s["image"]}
    assert rocm and cuda
    for service in rocm.values():
        assert any("/dev/kfd" in str(d) for d in service["devices"])
        assert any("/dev/dri" in str(d) for d in service["devices"])
        assert {"video", "render"} <= set(service["group_add"])
        gpu = service["command"][service["command"].index("--gpu") + 1]
        assert service["environment"]["ROCR_VISIBLE_DEVICES"] == gpu
    assert len({s["environment"]["ROCR_VISIBLE_DEVICES"] for s in rocm.values()}) == len(rocm)
    reservations = [s["deploy"]["resources"]["reservations"]["devices"] for s in cuda.values()]
    device_ids = [tuple(d["device_ids"]) for devices in reservations for d in devices]
    assert len(set(device_ids)) == len(cuda)


def test_every_celery_worker_reaches_the_broker_the_database_and_the_shared_artifacts(
    compose: dict[str, Any],
) -> None:
    """`tunebase worker` exits 2 without TUNEBASE_BROKER_URL, and under `restart: unless-stopped` a service
    that lacks it restarts forever (the compile workers once inherited the worker anchors, which set no
    environment); a compile worker that does not share the GPU workers' artifact volume helps nobody."""
    services = compose["services"]
    workers = {n: s for n, s in services.items() if (s.get("command") or [])[:2] == ["tunebase", "worker"]}
    expected = {"maintenance", "compile-cuda", "compile-rocm", "worker-sm90-gpu0", "worker-gfx906-gpu0"}
    assert expected <= set(workers)
    for name, service in workers.items():
        env = service.get("environment") or {}
        for key in ("TUNEBASE_BROKER_URL", "TUNEBASE_DATABASE_URL", "TUNEBASE_ARTIFACT_DIR"):
            assert env.get(key), (name, key)
        mounts = [str(v.get("target") if isinstance(v, dict) else v) for v in service.get("volumes") or []]
        assert any(env["TUNEBASE_ARTIFACT_DIR"] in m for m in mounts), (name, mounts)


def test_every_service_command_exists_in_the_project(compose: dict[str, Any]) -> None:
    from celery.bin.celery import celery as celery_cli

    checked = 0
    for name, service in compose["services"].items():
        command = service.get("command")
        if command is None or name in ("postgres", "redis"):
            continue
        argv = command if isinstance(command, list) else shlex.split(command)
        if argv[0] == "tunebase":
            resolve_tunebase(argv[1:])
        elif argv[0] == "celery":
            assert argv[1:3] == ["-A", "workers.celery_app"], name
            import workers.celery_app as celery_module

            assert celery_module.app.main == "tunebase"
            assert argv[3] in celery_cli.commands, (name, argv[3])
        else:
            pytest.fail(f"service {name} runs {argv[0]!r}, which this project does not provide")
        checked += 1
    assert checked >= 6


def test_a_misspelled_command_would_be_caught() -> None:
    for bad in (["worker", "--gpuu", "0"], ["wrker"], ["db", "upgrde"]):
        with pytest.raises(Exception) as caught:
            resolve_tunebase(bad)
        assert usage_error(caught.value), (bad, caught.value)


@pytest.mark.parametrize("dockerfile", ["api", "worker-rocm", "worker-cuda"])
def test_dockerfiles_copy_what_exists_and_run_a_tunebase_command(dockerfile: str) -> None:
    text = (REPO / "docker" / f"{dockerfile}.Dockerfile").read_text()
    for line in text.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                if not source.endswith("*"):
                    assert (REPO / source).exists(), source
        if line.startswith("CMD "):
            argv = yaml.safe_load(line.removeprefix("CMD "))
            assert argv[0] == "tunebase"
            resolve_tunebase(argv[1:])
    if dockerfile == "worker-rocm":
        assert "hip-python==${HIP_PYTHON_VERSION}" in text and "rocm/dev-ubuntu-22.04" in text
