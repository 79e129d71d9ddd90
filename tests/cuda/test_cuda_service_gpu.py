"""A full smoke sweep through the real service on the GPU: `tunebase serve` (SQLite, embedded worker).

The embedded worker must pick the cuda backend for sm_90 tasks when it detects the GPU.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_server, stop_server
from workers.harness import cuda_driver as cd

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cd.available(), reason="cuda-python is not installed"),
]


def test_smoke_sweep_on_gpu_through_the_service(tmp_path: Path) -> None:
    from kernels.formats.packing import FIRST_WAVE
    from service.db.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'tunebase.sqlite3'}"
    upgrade(url)
    server = start_server(tmp_path, url, tmp_path / "artifacts")
    try:
        made = server.cli("token", "create", "--name", "gpu-ci", "--scopes", "submit")
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip().splitlines()[-1]
        client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        body = {
            "arch": "sm_90", "phase": "decode", "formats": list(FIRST_WAVE), "profile": "family-smoke",
            "m": [1, 2], "min_dispatches": 5, "max_dispatches": 5, "labels": {"ci": "gpu-smoke"},
        }  # fmt: skip
        created = client.post("/v1/sweeps", json=body, headers={"Idempotency-Key": "gpu-smoke"})
        assert created.status_code == 202, created.text
        sweep_id = created.json()["id"]
        deadline = time.monotonic() + 300
        status: dict[str, object] = {}
        while time.monotonic() < deadline:
            status = client.get(f"/v1/sweeps/{sweep_id}").json()
            if status["status"] in ("done", "failed"):
                break
            time.sleep(0.5)
        assert status.get("status") == "done", (status, (tmp_path / "server.log").read_text()[-3000:])
        results = client.get("/v1/results", params={"sweep": sweep_id, "limit": 500}).json()
        items = results["items"] if isinstance(results, dict) else results
        assert len(items) == len(FIRST_WAVE) * 2 * 20
        assert all(item["parity"]["pass"] for item in items), [i for i in items if not i["parity"]["pass"]][
            :3
        ]
        winners = client.get("/v1/winners", params={"arch": "sm_90"}).json()
        winner_items = winners["items"] if isinstance(winners, dict) else winners
        assert len(winner_items) == len(FIRST_WAVE) * 2
        dispatches = client.get(f"/v1/measurements/{items[0]['id']}/dispatches").json()
        rows = dispatches["items"] if isinstance(dispatches, dict) else dispatches
        assert len(rows) == 5 and all(row["device_ns"] > 0 for row in rows)
    finally:
        stop_server(server)
