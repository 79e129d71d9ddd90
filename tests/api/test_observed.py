"""Observed shapes: deduplicated reports (both databases), field errors, and offered to the next sweep."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.auth import create_token
from service.config import Settings
from service.db.session import session_scope
from service.observed import bucket_m, default_phase

SPEC = {
    "arch": "host",
    "phase": "decode",
    "formats": ["Q8_0"],
    "shapes": [{"name": "Planned", "n": 256, "k": 256}],
    "m": [1],
    "variants": ["MX4/KB1/RW1/U4/RG1/PG0/PP0"],
    "include_observed": True,
}


def _client(url: str, tmp_path: Path) -> TestClient:
    settings = Settings(home=tmp_path, database_url=url, artifact_dir=tmp_path / "artifacts")
    with session_scope(url) as session:
        token = create_token(session, "engine", ["submit"])
    app = create_app(settings, start_embedded_worker=False)
    return TestClient(app, headers={"Authorization": f"Bearer {token}"})


def test_reports_dedupe_and_feed_the_next_sweep(migrated_url: str, tmp_path: Path) -> None:
    client = _client(migrated_url, tmp_path)
    report = {"arch": "host", "format": "Q8_0", "m": 3, "n": 512, "k": 1024, "source": "engine-a"}
    first = client.post("/v1/observed-shapes", json=report)
    assert first.status_code == 201, first.text
    again = client.post("/v1/observed-shapes", json={**report, "source": "engine-b"}).json()
    assert again["id"] == first.json()["id"] and again["count"] == 2 and again["source"] == "engine-b"
    assert again["phase"] == "decode" and again["last_seen"] >= first.json()["last_seen"]
    client.post("/v1/observed-shapes", json={**report, "m": 1, "n": 256, "k": 256})  # already planned
    client.post("/v1/observed-shapes", json={**report, "format": "Q4_0"})  # not in the sweep's formats
    client.post("/v1/observed-shapes", json={**report, "arch": "gfx906"})  # another arch
    listed = client.get("/v1/observed-shapes", params={"arch": "host"}).json()
    assert listed["total"] == 3 and listed["items"][0]["count"] == 2  # most reported first

    sweep = client.post("/v1/sweeps", json=SPEC)
    assert sweep.status_code == 202, sweep.text
    body = sweep.json()
    assert body["tasks"]["total"] == 2  # the planned point + the one new observed point
    tasks = client.get("/v1/results", params={"sweep": body["id"]}).json()
    assert tasks["total"] == 0  # not run: the embedded worker is off here
    offered = client.get("/v1/observed-shapes", params={"arch": "host", "pending": "false"}).json()
    assert {(o["format"], o["m"], o["n"]) for o in offered["items"]} == {("Q8_0", 3, 512), ("Q8_0", 1, 256)}
    assert {o["last_sweep_id"] for o in offered["items"]} == {body["id"]}
    pending = client.get("/v1/observed-shapes", params={"pending": "true"}).json()
    assert {(o["arch"], o["format"]) for o in pending["items"]} == {("host", "Q4_0"), ("gfx906", "Q8_0")}
    plain = client.post("/v1/sweeps", json={**SPEC, "include_observed": False}).json()
    assert plain["tasks"]["total"] == 1


def test_bad_reports_name_their_field(migrated_url: str, tmp_path: Path) -> None:
    client = _client(migrated_url, tmp_path)
    good = {"arch": "host", "format": "Q8_0", "m": 1, "n": 64, "k": 64}
    for patch, field in (
        ({"format": "Q9_9"}, "format"),
        ({"k": 100}, "k"),
        ({"m": 0}, "m"),
        ({"arch": "gfx1"}, "arch"),
        ({"colour": "red"}, "colour"),
    ):
        response = client.post("/v1/observed-shapes", json={**good, **patch})
        assert response.status_code == 422, (patch, response.text)
        assert [f["field"] for f in response.json()["error"]["fields"]] == [field]
    assert client.get("/v1/observed-shapes").json()["total"] == 0  # nothing half-written


def test_phase_and_bucket_policy() -> None:
    assert default_phase(4) == "decode" and default_phase(5) == "prefill"
    assert (
        bucket_m("prefill", 5) == 64 and bucket_m("prefill", 545) == 576 and bucket_m("prefill", 9999) == 4096
    )
    assert bucket_m("decode", 3) == 3
