"""The compose deployment built and run: a sweep through the containers, then a worker killed mid-sweep.

Run by `make compose-test` (part of `make test-full`, never `make test`): it needs a container engine
(scripts/container-engine.sh) and, where no registry is reachable, the local base image
(scripts/local-base-image.sh). TUNEBASE_COMPOSE_BASE=registry builds on the public images instead.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.deploy.compose_harness import Compose, ComposeError

pytestmark = pytest.mark.compose

RUNNING = {"postgres", "redis", "api", "beat", "maintenance", "worker-host"}
VARIANTS = ["MX4/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB4/RW1/U4/RG1/PG0/PP0"]


def spec(prefix: str, dispatches: int) -> dict[str, Any]:
    shapes = [{"name": f"{prefix}{i}", "n": 256, "k": 256 * (i + 1)} for i in range(4)]
    return {
        "arch": "host", "phase": "decode", "formats": ["Q8_0"], "shapes": shapes, "m": [1],
        "variants": VARIANTS, "min_dispatches": dispatches, "max_dispatches": dispatches, "warmup": 2,
    }  # fmt: skip


@contextlib.contextmanager
def logs_on_failure(compose: Compose) -> Iterator[None]:
    """On any failure, keep every service's log in var/compose-test/ and show its tail."""
    try:
        yield
    except BaseException:
        path = compose.save_logs()
        print(f"\n--- compose logs (all of them in {path}) ---\n" + path.read_text()[-15000:])
        raise


def wait_until(describe: str, timeout: float, probe: Callable[[], Any]) -> Any:
    """Poll probe() until it returns something truthy; fail with the last value after timeout seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, ComposeError):
            last = probe()
            if last:
                return last
        time.sleep(1)
    raise AssertionError(f"{describe}: not reached in {timeout:.0f} s; last seen {last!r}")


def sweep_status(client: httpx.Client, sweep_id: int) -> dict[str, Any]:
    response = client.get(f"/v1/sweeps/{sweep_id}")
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    assert body["status"] not in ("failed", "cancelled"), body
    return body


def psql(compose: Compose, query: str) -> list[list[str]]:
    """Rows from the deployment's own Postgres (not published on the host), as text."""
    argv = [
        "exec",
        "-T",
        "postgres",
        "psql",
        "-U",
        "tunebase",
        "-d",
        "tunebase",
        "-At",
        "-F",
        "|",
        "-c",
        query,
    ]
    return [line.split("|") for line in compose.run(*argv, timeout=120).stdout.splitlines() if line]


def test_a_sweep_runs_through_the_compose_deployment_and_survives_a_killed_worker(compose: Compose) -> None:
    with logs_on_failure(compose):
        with compose.timed("build"):
            # One build per image: migrate, beat, maintenance and worker-host run the api service's image.
            compose.run("build", "postgres", "redis", "api", timeout=3600)
        with compose.timed("up"):  # depends_on waits: postgres/redis healthy, migrate exited 0
            compose.run("up", "-d", "--no-build", timeout=900)
        with compose.timed("api_healthy"):
            wait_until("api healthy", 300, lambda: "(healthy)" in compose.state("api"))
        assert re.search(r"\bExit 0\b", compose.state("migrate")), compose.state("migrate")
        for service in RUNNING:
            assert " Up " in f" {compose.state(service)} ", (service, compose.state(service))

        created = compose.run("exec", "-T", "api", "tunebase", "token", "create", "--name", "compose-test",
                              "--scopes", "submit").stdout  # fmt: skip
        token = re.search(r"tb_[A-Za-z0-9_-]+", created)
        assert token, created
        base_url = "http://" + compose.env["TUNEBASE_API_PORT"]
        headers = {"Authorization": f"Bearer {token.group(0)}"}
        with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
            ready = client.get("/readyz").json()
            assert (ready["status"], ready["database"], ready["broker"]) == ("ready", "ok", "ok"), ready

            # 1. A sweep through the API, run by the host worker container, then winners and a table.
            with compose.timed("sweep"):
                response = client.post("/v1/sweeps", json=spec("Compose", 200))
                assert response.status_code == 202, response.text
                first = response.json()["id"]
                wait_until("first sweep done", 600, lambda: sweep_status(client, first)["status"] == "done")
            assert sweep_status(client, first)["tasks"]["done"] == 4
            winners = client.get("/v1/winners", params={"arch": "host", "phase": "decode"}).json()
            ours = [w for w in winners["items"] if w["shape"].startswith("Compose")]
            assert len(ours) == 4 and all(w["variant"] in VARIANTS and w["median_us"] > 0 for w in ours), ours
            table = client.post("/v1/tables", json={"arch": "host", "phase": "decode"})
            assert table.status_code == 201, table.text
            assert first in table.json()["sweep_ids"] and table.json()["entries"] >= 1
            inc = client.get(f"/v1/tables/{table.json()['id']}/inc").text
            assert "#pragma once" in inc and "// arch: host" in inc, inc[:500]

            # 2. SIGKILL the worker container while it runs a task; restart it; the sweep still finishes.
            response = client.post("/v1/sweeps", json=spec("Killed", 3000))
            second = response.json()["id"]
            wait_until("a task of the second sweep running", 300,
                       lambda: sweep_status(client, second)["tasks"]["running"] > 0)  # fmt: skip
            compose.run("kill", "-s", "SIGKILL", "worker-host")
            killed_state = compose.state("worker-host")
            # The dead worker's task stays `running` in the database until its lease lapses.
            running = f"SELECT id, attempts FROM tasks WHERE sweep_id = {second} AND state = 'running'"
            victim = psql(compose, running)
            assert len(victim) == 1, victim
            with compose.timed("recovery"):
                compose.run("start", "worker-host")
                wait_until("second sweep done", 900, lambda: sweep_status(client, second)["status"] == "done")
            assert sweep_status(client, second)["tasks"]["done"] == 4
            rows = psql(compose, f"SELECT attempts, state FROM tasks WHERE id = {victim[0][0]}")
            assert rows and rows[0][1] == "done" and int(rows[0][0]) > int(victim[0][1]), (victim, rows)
            ready_lines = [
                line for line in compose.run("logs", "--no-color", "worker-host").stdout.splitlines()
                if re.search(r"host\.\d+@\S+ ready\.", line)
            ]  # fmt: skip
            assert len(ready_lines) >= 2, (killed_state, ready_lines)  # the first process, the restarted one

        # 3. Tear down: containers, volumes and the project network all go.
        with compose.timed("down"):
            compose.run("down", "-v", "--remove-orphans", "--timeout", "20", timeout=300)
        assert compose.container_ids() == []
        label = f"label=com.docker.compose.project={compose.project}"
        for kind in ("network", "volume"):
            left = subprocess.run(
                [compose.engine_cli, kind, "ls", "-q", "--filter", label],
                capture_output=True, text=True, timeout=60, check=True,
            ).stdout.split()  # fmt: skip
            assert left == [], (kind, left)

    compose.log_dir.mkdir(parents=True, exist_ok=True)
    record = {"project": compose.project, "engine": compose.engine_cli, "files": compose.files,
              "seconds": compose.timings}  # fmt: skip
    (compose.log_dir / "timings-cpu.json").write_text(json.dumps(record, indent=2) + "\n")
    print("\ncompose-test timings:", json.dumps(record))
