"""With a broker, the workers themselves say which arch queues they consume: a real Celery worker answers."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from kernels.packages.loader import builtin_packages
from service.api.app import create_app
from service.api.presence import broker_presence
from service.auth import create_token
from service.db.session import session_scope
from service.sweeps.availability import waiting_warnings
from tests.distributed.conftest import Cluster, smoke_spec

ROCM_VARIANT = builtin_packages()["tb-decode"].space("rocm")[0].name  # host variants break rocm rules


def test_status_counts_live_workers_per_arch(cluster: Cluster) -> None:
    assert broker_presence(cluster.broker_url, timeout=0.5).count("host") == 0
    cluster.start_worker("presence")
    deadline = time.monotonic() + 90
    presence = broker_presence(cluster.broker_url)
    while presence.count("host") < 1 and time.monotonic() < deadline:
        time.sleep(1.0)
        presence = broker_presence(cluster.broker_url)
    assert presence.source == "broker" and presence.count("host") == 1, cluster.log("presence")
    assert presence.count("gfx906") == 0

    with session_scope(cluster.database_url) as session:
        token = create_token(session, "presence", ["submit"])
    client = TestClient(create_app(cluster.settings), headers={"Authorization": f"Bearer {token}"})
    gfx906 = smoke_spec(arch="gfx906", shapes=[{"name": "P", "n": 64, "k": 256}], variants=[ROCM_VARIANT])
    waiting = client.post("/v1/sweeps", json=gfx906)
    assert waiting.status_code == 202, waiting.text
    body = waiting.json()
    assert body["workers_online"] == 0
    assert body["warnings"] == [
        "no live worker serves gfx906 (0 online): 1 task(s) wait until one starts; "
        "workers online by arch: host (1); start one (`tunebase worker --arch gfx906`)"
    ]
    served = client.post("/v1/sweeps", json=smoke_spec(shapes=[{"name": "Q", "n": 64, "k": 256}])).json()
    assert served["warnings"] == [] and served["workers_online"] == 1
    assert cluster.wait(served["id"], timeout=180)["done"] == 1  # and the live worker really runs it
    again = client.get(f"/v1/sweeps/{body['id']}").json()
    assert again["status"] == "queued" and again["warnings"] == body["warnings"]


def test_warnings_only_while_tasks_wait() -> None:
    from service.sweeps.availability import Presence

    nobody = Presence({}, "none")
    queued = {"queued": 2, "running": 0, "done": 0}
    assert "TUNEBASE_EMBEDDED_WORKER=false" in waiting_warnings("host", queued, nobody)[0]
    assert waiting_warnings("host", {**queued, "queued": 0}, nobody) == []
    unknown = Presence({}, "broker", error="Connection refused")
    assert waiting_warnings("gfx90a", queued, unknown)[0].startswith("cannot tell whether a worker serves")


def test_an_unreachable_broker_is_unknown_not_zero() -> None:
    from tests.conftest import free_port

    presence = broker_presence(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5)
    assert presence.error and presence.online == {}
    warning = waiting_warnings("gfx906", {"queued": 3}, presence)[0]
    assert warning.startswith("cannot tell whether a worker serves gfx906: the broker did not answer")
