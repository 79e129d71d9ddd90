"""`POST /v1/imports/rocprof` and `tunebase import rocprof` on the fixture captures, SQLite and Postgres."""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, select

from service.api.app import create_app
from service.auth import create_token
from service.config import Settings
from service.db.models import Capture, CaptureDispatch, CaptureKernelStat
from service.db.session import session_scope
from tests.conftest import LiveServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rocprof"
TRACE = "v3_rocm63_kernel_trace.csv"
A, B, FILL = "tb_decode_q4_0_kb8_tw8", "tb_decode_q4_0_kb1_tw4", "__amd_rocclr_fillBufferAligned"


def expected_from_trace(name: str, start: str, end: str, kernel_col: str) -> dict[str, dict[str, float]]:
    """Per-kernel figures computed straight from the raw CSV (independently of the parsers)."""
    durations: dict[str, list[int]] = defaultdict(list)
    with (FIXTURES / name).open(newline="") as handle:
        for row in csv.DictReader(handle):
            kernel = row[kernel_col].removesuffix(" [clone .kd]").removesuffix(".kd")
            durations[kernel].append(int(row[end]) - int(row[start]))
    return {
        k: {"calls": len(v), "median_ns": statistics.median(v), "min_ns": min(v), "max_ns": max(v),
            "total_ns": sum(v)}
        for k, v in durations.items()
    }  # fmt: skip


def counts(url: str) -> tuple[int, int, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            return (
                int(c.scalar(select(func.count()).select_from(Capture)) or 0),
                int(c.scalar(select(func.count()).select_from(CaptureDispatch)) or 0),
                int(c.scalar(select(func.count()).select_from(CaptureKernelStat)) or 0),
            )
    finally:
        engine.dispose()


@pytest.fixture
def client(migrated_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    settings = Settings(home=tmp_path, database_url=migrated_url, artifact_dir=tmp_path / "artifacts")
    with session_scope(migrated_url) as session:
        token = create_token(session, "importer", ["read", "submit"])
    app = create_app(settings, start_embedded_worker=False)
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as test_client:
        yield test_client, migrated_url


def json_files(*names: str) -> list[dict[str, str]]:
    return [{"name": n, "content": (FIXTURES / n).read_text()} for n in names]


def test_json_import_stores_rows_and_summarises(client: tuple[TestClient, str]) -> None:
    http, url = client
    r = http.post(
        "/v1/imports/rocprof", json={"label": "mi50", "files": json_files(TRACE, "v3_kernel_stats.csv")}
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert [f["kind"] for f in body["files"]] == ["rocprofv3_kernel_trace", "rocprofv3_kernel_stats"]
    expected = expected_from_trace(TRACE, "Start_Timestamp", "End_Timestamp", "Kernel_Name")
    got = {k["kernel"]: k for k in body["kernels"]}
    assert set(got) == set(expected) == {A, B, FILL}
    for kernel, figures in expected.items():
        assert {key: got[kernel][key] for key in figures} == figures
    totals = [k["total_ns"] for k in body["kernels"]]
    assert totals == sorted(totals, reverse=True)
    with open(FIXTURES / TRACE, newline="") as handle:
        raw_rows = list(csv.DictReader(handle))
    assert counts(url) == (1, len(raw_rows), 3)

    # The stored rows keep the capture's agent, queue, dispatch ids and resources.
    engine = create_engine(url)
    with engine.connect() as c:
        rows = c.execute(select(CaptureDispatch).order_by(CaptureDispatch.seq)).all()
    engine.dispose()
    for row, src in zip(rows, raw_rows, strict=True):
        assert row.agent == "4" and row.queue == src["Queue_Id"]
        assert row.dispatch_id == int(src["Dispatch_Id"])
        assert row.start_ns == int(src["Start_Timestamp"]) and row.end_ns == int(src["End_Timestamp"])
        assert row.resources["vgpr"] == int(src["VGPR_Count"]) and row.resources["sgpr"] == int(
            src["SGPR_Count"]
        )

    again = http.get(f"/v1/imports/rocprof/{body['id']}")
    assert again.status_code == 200 and again.json() == body
    assert http.get("/v1/imports/rocprof/999999").status_code == 404


@pytest.mark.parametrize(
    ("name", "start", "end", "kernel_col"),
    [
        ("v1_rocm4_results.csv", "BeginNs", "EndNs", "KernelName"),
        ("v1_rocm5_results.csv", "BeginNs", "EndNs", "KernelName"),
        ("v3_rocm60_kernel_trace.csv", "Start_Timestamp", "End_Timestamp", "Kernel_Name"),
    ],
)
def test_multipart_import_of_each_generation(
    client: tuple[TestClient, str], name: str, start: str, end: str, kernel_col: str
) -> None:
    http, _ = client
    with (FIXTURES / name).open("rb") as handle:
        r = http.post(
            "/v1/imports/rocprof", files=[("files", (name, handle, "text/csv"))], data={"label": "x"}
        )
    assert r.status_code == 201, r.text
    got = {k["kernel"]: k for k in r.json()["kernels"]}
    expected = expected_from_trace(name, start, end, kernel_col)
    assert set(got) == set(expected)
    for kernel, figures in expected.items():
        assert {key: got[kernel][key] for key in figures} == figures


def test_stats_only_capture_has_no_median(client: tuple[TestClient, str]) -> None:
    http, _ = client
    r = http.post("/v1/imports/rocprof", json={"files": json_files("v1_results.stats.csv")})
    assert r.status_code == 201, r.text
    with (FIXTURES / "v1_results.stats.csv").open(newline="") as handle:
        raw = {row["Name"].removesuffix(" [clone .kd]"): row for row in csv.DictReader(handle)}
    for k in r.json()["kernels"]:
        assert k["median_ns"] is None and k["min_ns"] is None
        assert k["calls"] == int(raw[k["kernel"]]["Calls"]) and k["total_ns"] == int(
            raw[k["kernel"]]["TotalDurationNs"]
        )


def test_bad_file_is_refused_with_its_line_and_nothing_is_stored(client: tuple[TestClient, str]) -> None:
    http, url = client
    lines = (FIXTURES / TRACE).read_text().splitlines()
    lines[3] = lines[3].replace("1551401624498602", "15514016x4498602", 1)
    damaged = {"name": "damaged.csv", "content": "\n".join(lines) + "\n"}
    unknown = {"name": "notes.csv", "content": "a,b,c\n1,2,3\n"}
    r = http.post(
        "/v1/imports/rocprof", json={"files": [*json_files("v1_rocm5_results.csv"), damaged, unknown]}
    )
    assert r.status_code == 422
    fields = r.json()["error"]["fields"]
    assert [f["field"] for f in fields] == ["files.1.content", "files.2.content"]
    assert fields[0]["message"].startswith("damaged.csv:4: ") and "not a number" in fields[0]["message"]
    assert fields[1]["message"].startswith("notes.csv:1: unknown file")
    assert counts(url) == (0, 0, 0)

    # A timestamp a BIGINT cannot hold is damage too, with its line.
    lines = (FIXTURES / "v1_rocm4_results.csv").read_text().splitlines()
    lines[2] = lines[2].replace("1551401624553113", "155140162455311300000000", 1)
    r = http.post("/v1/imports/rocprof", json={"files": [{"name": "big.csv", "content": "\n".join(lines)}]})
    assert r.status_code == 422 and r.json()["error"]["fields"][0]["message"].startswith("big.csv:3: ")

    binary = http.post("/v1/imports/rocprof", files=[("files", ("x.csv", b"\xff\xfe\x00", "text/csv"))])
    assert binary.status_code == 422 and binary.json()["error"]["fields"][0]["field"] == "files.0"
    assert http.post("/v1/imports/rocprof", json={"files": []}).status_code == 422
    surrogate = '{"files": [{"name": "a\\udafd.csv", "content": "\\udc0e"}]}'
    lone = http.post("/v1/imports/rocprof", content=surrogate, headers={"content-type": "application/json"})
    assert lone.status_code == 422 and lone.json()["error"]["fields"][0]["field"].startswith("files.0.")
    assert (
        http.post(
            "/v1/imports/rocprof", content=b"{", headers={"content-type": "application/json"}
        ).status_code
        == 422
    )
    assert counts(url) == (0, 0, 0)


def test_cli_import(live_server: LiveServer, tmp_path: Path) -> None:
    made = live_server.cli("token", "create", "--name", "ci", "--scopes", "read,submit")
    assert made.returncode == 0, made.stderr
    live_server.env["TUNEBASE_TOKEN"] = made.stdout.strip()

    bad = tmp_path / "kernel_trace.csv"
    text = (FIXTURES / "v3_rocm62_kernel_trace.csv").read_text().splitlines()
    text[2] = text[2][: len(text[2]) // 2]  # a truncated row
    bad.write_text("\n".join(text) + "\n")
    run = live_server.cli("import", "rocprof", str(FIXTURES / TRACE), str(bad))
    assert run.returncode == 2
    assert "kernel_trace.csv:3: expected 18 fields" in run.stderr.replace("\n", " ")
    assert counts(live_server.database_url) == (0, 0, 0)

    run = live_server.cli(
        "import", "rocprof", str(FIXTURES / "v1_rocm5_results.csv"), "--label", "mi50 rocm5", "--json"
    )
    assert run.returncode == 0, run.stderr
    kernels = json.loads(run.stdout)
    expected = expected_from_trace("v1_rocm5_results.csv", "BeginNs", "EndNs", "KernelName")
    assert {k["kernel"]: {key: k[key] for key in expected[k["kernel"]]} for k in kernels} == expected
    assert set(kernels[0]) == {"kernel", "calls", "median_ns", "min_ns", "max_ns", "total_ns"}

    table = live_server.cli("import", "rocprof", str(FIXTURES / TRACE))
    assert table.returncode == 0, table.stderr
    trace = expected_from_trace(TRACE, "Start_Timestamp", "End_Timestamp", "Kernel_Name")
    assert "rocprofv3_kernel_trace" in table.stdout
    assert all(str(trace[k]["total_ns"]) in table.stdout for k in (A, B, FILL))
    assert counts(live_server.database_url)[0] == 2


# The fixture captures were recorded from the KB/TW decode kernels; the matching test renames their two
# decode kernels to per-format symbols of today's tb-decode space (tb_decode_<format>_<symbol rest>).
RENAMED = {
    A: "tb_decode_q4_0_mx4_kb1_rw2_u4_rg1_pg0_pp0",
    B: "tb_decode_q4_0_mx4_kb1_rw1_u4_rg1_pg0_pp0",
}


def renamed_files(*names: str) -> list[dict[str, str]]:
    files = json_files(*names)
    for f in files:
        for old, new in RENAMED.items():
            f["content"] = f["content"].replace(old, new)
    return files


def test_captures_are_listed_matched_to_variants_and_shown(client: tuple[TestClient, str]) -> None:
    http, _ = client
    assert http.get("/v1/imports/rocprof").json() == {"total": 0, "limit": 50, "offset": 0, "items": []}
    traced = http.post("/v1/imports/rocprof", json={"label": "trace", "files": renamed_files(TRACE)}).json()
    stats_only = http.post(
        "/v1/imports/rocprof", json={"label": "stats", "files": renamed_files("v3_kernel_stats.csv")}
    ).json()
    a, b = RENAMED[A], RENAMED[B]
    listing = http.get("/v1/imports/rocprof").json()
    assert [c["id"] for c in listing["items"]] == [stats_only["id"], traced["id"]]  # newest first
    assert listing["items"][1]["dispatches"] == traced["dispatches"] > 0
    assert listing["items"][0]["dispatches"] == 0 and listing["items"][0]["files"][0]["rows"] == 3

    detail = {k["kernel"]: k for k in http.get(f"/v1/imports/rocprof/{traced['id']}").json()["kernels"]}
    matched = (detail[a]["package"], detail[a]["variant"], detail[a]["format"])
    assert matched == ("tb-decode", "MX4/KB1/RW2/U4/RG1/PG0/PP0", "Q4_0")
    assert detail[b]["variant"] == "MX4/KB1/RW1/U4/RG1/PG0/PP0" and detail[FILL]["variant"] is None
    assert all(k["source"] == "dispatches" and k["median_ns"] is not None for k in detail.values())
    only = {k["kernel"]: k for k in http.get(f"/v1/imports/rocprof/{stats_only['id']}").json()["kernels"]}
    assert only[a]["source"] == "statistics file" and only[a]["median_ns"] is None
    assert only[a]["average_ns"] == pytest.approx(213148 / 5)  # TotalDurationNs / Calls of the file

    page = http.get("/dashboard/captures")
    assert page.status_code == 200 and f'href="/dashboard/captures/{traced["id"]}"' in page.text
    shown = http.get(f"/dashboard/captures/{traced['id']}")
    assert shown.status_code == 200 and 'data-variant="MX4/KB1/RW2/U4/RG1/PG0/PP0"' in shown.text
    assert shown.text.count("<td>dispatches</td>") == 3
    assert http.get("/dashboard/captures/99999").status_code == 404
