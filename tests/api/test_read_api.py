"""Read routes over a real host sweep: results, dispatches (JSON + CSV), registry, metrics, errors."""

from __future__ import annotations

import csv
import io

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select, update

from kernels.packages.package import NOT_APPLICABLE_PREFIX
from service.db.models import Measurement
from service.db.session import session_scope
from tests.api.conftest import Populated

ENVELOPE = {"total", "limit", "offset", "items"}


def test_results_filter_and_paginate(populated: Populated) -> None:
    client = populated.client(populated.read_token)
    everything = client.get("/v1/results", params={"limit": 500}).json()
    assert set(everything) == ENVELOPE
    assert everything["total"] == 2 * 2 * 2 * 3 == len(everything["items"])  # formats x shapes x M x variants
    ids = [item["id"] for item in everything["items"]]
    assert ids == sorted(ids, reverse=True)
    first = client.get("/v1/results", params={"limit": 5, "offset": 0}).json()
    second = client.get("/v1/results", params={"limit": 5, "offset": 5}).json()
    assert [i["id"] for i in first["items"] + second["items"]] == ids[:10]
    assert first["total"] == second["total"] == 24

    point = client.get(
        "/v1/results",
        params={"format": "Q4_0", "m": 2, "n": 128, "k": 512, "variant": "MX4/KB1/RW2/U4/RG1/PG0/PP0"},
    ).json()
    assert point["total"] == 1
    item = point["items"][0]
    assert (item["format"], item["m"], item["n"], item["k"], item["variant"]) == (
        "Q4_0",
        2,
        128,
        512,
        "MX4/KB1/RW2/U4/RG1/PG0/PP0",
    )
    assert item["shape"] == "Api_Tall" and item["sweep_id"] == populated.sweep_id
    assert item["n_dispatches"] >= 6 and item["p10_us"] <= item["median_us"] <= item["p90_us"]
    assert item["parity"]["pass"] is True and item["parity"]["cosine"] > 0.999
    by_shape = client.get("/v1/results", params={"shape": "Api_Wide", "arch": "host"}).json()
    assert by_shape["total"] == 12 and {i["shape"] for i in by_shape["items"]} == {"Api_Wide"}
    assert client.get("/v1/results", params={"sweep": populated.sweep_id + 99}).json()["total"] == 0
    assert client.get("/v1/results", params={"parity": "false"}).json()["total"] == 0

    bad = client.get("/v1/results", params={"phase": "sideways", "limit": 0})
    assert bad.status_code == 422
    assert sorted(f["field"] for f in bad.json()["error"]["fields"]) == ["limit", "phase"]


def test_dispatches_json_and_streamed_csv_agree(populated: Populated) -> None:
    client = populated.client(populated.read_token)
    measurement = client.get("/v1/results", params={"limit": 1}).json()["items"][0]
    as_json = client.get(f"/v1/measurements/{measurement['id']}/dispatches").json()
    assert as_json["measurement_id"] == measurement["id"]
    assert as_json["total"] == measurement["n_dispatches"] == len(as_json["items"])
    seqs = [row["seq"] for row in as_json["items"]]
    assert seqs == sorted(seqs)
    page = client.get(
        f"/v1/measurements/{measurement['id']}/dispatches", params={"limit": 2, "offset": 1}
    ).json()
    assert page["items"] == as_json["items"][1:3]

    for response in (
        client.get(f"/v1/measurements/{measurement['id']}/dispatches", params={"format": "csv"}),
        client.get(f"/v1/measurements/{measurement['id']}/dispatches", headers={"Accept": "text/csv"}),
    ):
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(response.text)))
        assert [{k: int(v) for k, v in row.items()} for row in rows] == as_json["items"]
    median_ns = sorted(r["device_ns"] for r in as_json["items"])[len(as_json["items"]) // 2]
    assert abs(median_ns / 1000 - measurement["median_us"]) / measurement["median_us"] < 0.5

    detail = client.get(f"/v1/measurements/{measurement['id']}").json()
    assert detail["artifact"]["backend"] == "host" and isinstance(detail["artifact"]["resources"], dict)
    missing = client.get("/v1/measurements/999999/dispatches")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_registry_routes(populated: Populated) -> None:
    client = populated.client(populated.read_token)
    devices = client.get("/v1/devices").json()
    assert set(devices) == ENVELOPE and devices["total"] == 1
    device = devices["items"][0]
    assert device["backend"] == "host" and device["arch"] == "host" and device["compute_units"] >= 1
    assert client.get("/v1/devices", params={"arch": "gfx906"}).json()["total"] == 0
    profiles = client.get("/v1/profiles", params={"limit": 500}).json()
    names = {p["name"] for p in profiles["items"]}
    assert {"qwen36-core", "qwen36", "smoke", "family-smoke"} <= names
    core = next(p for p in profiles["items"] if p["name"] == "qwen36-core")
    assert {"name": "Qwen36_FFN_GateUp", "n": 17408, "k": 5120} in core["shapes"]


def test_sweep_status_counts_parity_failures(populated: Populated) -> None:
    client = populated.client(populated.read_token)
    assert client.get(f"/v1/sweeps/{populated.sweep_id}").json()["parity_failures"] == 0
    url = populated.settings.resolved_database_url
    with session_scope(url) as session:
        victim = session.scalars(
            select(Measurement.id).where(Measurement.sweep_id == populated.sweep_id)
        ).first()
        excluded = session.scalars(
            select(Measurement.id).where(Measurement.sweep_id == populated.sweep_id, Measurement.id != victim)
        ).first()
        session.execute(update(Measurement).where(Measurement.id == victim).values(parity_pass=False))
        # a variant its restrictions exclude at this point (the runner's wording): not a parity failure
        session.execute(
            update(Measurement)
            .where(Measurement.id == excluded)
            .values(parity_pass=False, error=NOT_APPLICABLE_PREFIX + "m <= mx")
        )
    try:
        status = client.get(f"/v1/sweeps/{populated.sweep_id}").json()
        assert status["parity_failures"] == 1 and status["status"] == "done"
        failing = client.get("/v1/results", params={"parity": "false"}).json()
        assert victim in [i["id"] for i in failing["items"]]
    finally:
        with session_scope(url) as session:
            session.execute(
                update(Measurement)
                .where(Measurement.id.in_([victim, excluded]))
                .values(parity_pass=True, error=None)
            )


def test_metrics_prometheus_text(populated: Populated) -> None:
    client = populated.client(populated.read_token)
    client.get("/v1/results")
    client.get("/v1/results", params={"phase": "nope"})
    response = client.get("/metrics")  # no token needed: counts only
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    tasks = {s.labels["state"]: s.value for s in families["tunebase_tasks"].samples}
    assert tasks["done"] == 8 and tasks["queued"] == 0
    sweeps = {s.labels["status"]: s.value for s in families["tunebase_sweeps"].samples}
    assert sweeps["done"] >= 1
    total = sum(i["n_dispatches"] for i in client.get("/v1/results", params={"limit": 500}).json()["items"])
    assert families["tunebase_dispatches_stored"].samples[0].value == total
    latency = families["tunebase_http_request_duration_seconds"].samples
    counts = {(s.labels["route"], s.labels["status"]): s.value for s in latency if s.name.endswith("_count")}
    assert counts[("/v1/results", "200")] >= 1 and counts[("/v1/results", "422")] == 1


def test_one_error_body_everywhere(populated: Populated) -> None:
    anonymous = populated.client()
    reader = populated.client(populated.read_token)
    responses = {
        401: anonymous.get("/v1/results"),
        403: reader.post(
            "/v1/observed-shapes", json={"arch": "host", "format": "Q8_0", "m": 1, "n": 64, "k": 64}
        ),
        404: reader.get("/v1/measurements/424242"),
        405: reader.delete("/v1/results"),
        422: reader.get("/v1/measurements/not-a-number"),
    }
    for status, response in responses.items():
        assert response.status_code == status, (status, response.text)
        error = response.json()["error"]
        assert set(error) == {"code", "message", "fields"} and error["message"]
    assert responses[422].json()["error"]["fields"][0]["field"] == "measurement_id"
    overflow = reader.get("/v1/sweeps/99999999999999999999999")
    assert overflow.status_code == 422 and overflow.json()["error"]["code"] == "validation_failed"
    # a body that is not JSON names the body and where it broke, not a bare character offset as the field
    broken = populated.client(populated.submit_token).post(
        "/v1/sweeps", content=b'{"arch": "host", "phase": ', headers={"Content-Type": "application/json"}
    )
    assert broken.status_code == 422, broken.text
    field = broken.json()["error"]["fields"][0]
    assert field["field"] == "body" and "not valid JSON at character" in field["message"], field
    # a filter naming no registered arch is a mistake to report, not an empty page
    typo = reader.get("/v1/winners", params={"arch": "gfx960"})
    assert typo.status_code == 422, typo.text
    field = typo.json()["error"]["fields"][0]
    assert field["field"] == "arch" and "unknown arch 'gfx960'" in field["message"], field
    assert "gfx906" in field["message"], field
    assert reader.get("/v1/results", params={"arch": "gfx960"}).status_code == 422
    for route in ("/v1/sweeps", "/v1/tables"):  # the same filter on the other lists
        typo = reader.get(route, params={"arch": "gfx960"})
        assert typo.status_code == 422 and "unknown arch 'gfx960'" in typo.text, (route, typo.text)
        assert reader.get(route, params={"arch": "gfx906"}).status_code == 200, route


def test_openapi_documents_examples_and_error_body(populated: Populated) -> None:
    schema = populated.client().get("/openapi.json").json()
    assert "ErrorBody" in schema["components"]["schemas"]
    results = schema["paths"]["/v1/results"]["get"]
    assert results["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith("ErrorBody")
    assert "example" in results["responses"]["200"]["content"]["application/json"]
    dispatches = schema["paths"]["/v1/measurements/{measurement_id}/dispatches"]["get"]["responses"]["200"]
    assert {"application/json", "text/csv"} <= set(dispatches["content"])
    observed = schema["components"]["schemas"]["ObservedReport"]
    assert observed["examples"][0]["format"] == "Q4_K"
    assert "include_observed" in schema["components"]["schemas"]["SweepSpec"]["properties"]


def test_a_missing_row_is_named_in_its_404(populated: Populated) -> None:
    """Sweeps, tables and measurements share one 404 (service.api.deps.row_or_404) naming what is missing."""
    reader = populated.client(populated.read_token)
    for path, message in (
        ("/v1/sweeps/424242", "sweep 424242 not found"),
        ("/v1/tables/424242", "table 424242 not found"),
        ("/v1/tables/424242/inc", "table 424242 not found"),
        ("/v1/measurements/424242", "measurement 424242 not found"),
    ):
        response = reader.get(path)
        assert response.status_code == 404, (path, response.text)
        assert response.json()["error"]["message"] == message, path


def test_a_sweep_with_points_no_variant_can_run_is_422(populated: Populated) -> None:
    """MX1 variants are compiled for M = 1 only (tb-decode's rule `m <= mx`): at M = 2 nothing could run."""
    submitter = populated.client(populated.submit_token)
    before = submitter.get("/v1/sweeps").json()["total"]
    spec = {
        "arch": "sm_90", "phase": "decode", "formats": ["Q4_0"], "m": [1, 2],
        "shapes": [{"name": "Unrunnable", "n": 4096, "k": 4096}],
        "variants": ["MX1/KB1/RW2/U5/RG1/PG0/PP16", "MX1/KB1/RW1/U5/RG1/PG4/PP17"],
    }  # fmt: skip
    refused = submitter.post("/v1/sweeps", json=spec)
    assert refused.status_code == 422, refused.text
    fields = refused.json()["error"]["fields"]
    assert [f["field"] for f in fields] == ["variants"], fields
    assert "1 planned point(s): Q4_0 Unrunnable (4096x4096) m=2" in fields[0]["message"], fields
    assert submitter.get("/v1/sweeps").json()["total"] == before
    # the same variants at M = 1 only are accepted
    accepted = submitter.post("/v1/sweeps", json={**spec, "m": [1]})
    assert accepted.status_code == 202, accepted.text
    assert submitter.post(f"/v1/sweeps/{accepted.json()['id']}/cancel").status_code in (200, 202)
