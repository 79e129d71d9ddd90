"""A sweep travels from HTTP to a compiled .inc: a real `tunebase serve` process, real compiler, real DB."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import LiveServer

SPEC: dict[str, Any] = {
    "arch": "host",
    "phase": "decode",
    "formats": ["Q8_0", "Q4_0"],
    "shapes": [{"name": "Slice_Wide", "n": 512, "k": 256}, {"name": "Slice_Tall", "n": 128, "k": 512}],
    "m": [1, 2],
    "min_dispatches": 5,
    "labels": {"ci_run": "slice"},
}


def _token(server: LiveServer, scopes: str) -> str:
    result = server.cli("token", "create", "--name", f"test-{scopes}", "--scopes", scopes)
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert token.startswith("tb_") and "\n" not in token
    return token


def _wait_done(client: httpx.Client, sweep_id: int, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status: dict[str, Any] = client.get(f"/v1/sweeps/{sweep_id}").json()
        if status["status"] in ("done", "failed", "cancelled"):
            return status
        time.sleep(0.3)
    raise AssertionError(f"sweep {sweep_id} did not finish: {status}")


def _replay(inc_text: str, points: list[tuple[int, int, int, int]], tmp_path: Path) -> list[tuple[int, ...]]:
    """Compile a C++ program against the built-in decode package's struct table and ask it every point."""
    header = tmp_path / "table.inc"
    header.write_text(inc_text)
    fields = ("mx", "kb", "rw", "u", "rg", "pg", "pp")
    printf = (
        'std::printf("'
        + " ".join(["%d"] * len(fields))
        + '\\n", '
        + ", ".join(f"out.{f}" for f in fields)
        + ");"
    )
    calls = "\n".join(
        f"  if (!selectTbDecode({cb}, {m}, {n}, {k}, out)) return 1;\n  {printf}" for cb, m, n, k in points
    )
    program = tmp_path / "replay.cpp"
    program.write_text(
        f'#include <cstdio>\n#include "{header}"\nint main() {{\n'
        "  using namespace tunebase::kernels::tb_decode;\n  TbDecodeConfig out{};\n"
        f"{calls}\n  return 0;\n}}\n"
    )
    binary = tmp_path / "replay"
    subprocess.run(["c++", "-std=c++17", "-O0", str(program), "-o", str(binary)], check=True, timeout=120)
    result = subprocess.run([str(binary)], capture_output=True, text=True, check=True, timeout=30)
    return [tuple(int(v) for v in line.split()) for line in result.stdout.splitlines()]


def test_sweep_to_compiled_table(live_server: LiveServer, tmp_path: Path) -> None:
    submit_token = _token(live_server, "submit")
    read_token = _token(live_server, "read")
    anonymous = httpx.Client(base_url=live_server.url, timeout=30)
    reader = httpx.Client(
        base_url=live_server.url, timeout=30, headers={"Authorization": f"Bearer {read_token}"}
    )
    client = httpx.Client(
        base_url=live_server.url, timeout=30, headers={"Authorization": f"Bearer {submit_token}"}
    )

    assert anonymous.post("/v1/sweeps", json=SPEC).status_code == 401
    assert anonymous.get("/v1/winners").status_code == 401
    assert reader.post("/v1/sweeps", json=SPEC).status_code == 403
    bogus = httpx.Client(base_url=live_server.url, headers={"Authorization": "Bearer tb_not_a_token"})
    assert bogus.get("/v1/sweeps").status_code == 401

    bad = client.post("/v1/sweeps", json={**SPEC, "formats": ["Q8_0", "Q9_9"]})
    assert bad.status_code == 422
    assert [f["field"] for f in bad.json()["error"]["fields"]] == ["formats.1"]
    unknown_field = client.post("/v1/sweeps", json={**SPEC, "colour": "blue"})
    assert (
        unknown_field.status_code == 422 and unknown_field.json()["error"]["fields"][0]["field"] == "colour"
    )
    bad_variant = client.post(
        "/v1/sweeps", json={**SPEC, "variants": ["MX4/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB3/RW1/U4/RG1/PG0/PP0"]}
    )
    assert (
        bad_variant.status_code == 422 and bad_variant.json()["error"]["fields"][0]["field"] == "variants.1"
    )
    bad_k = client.post("/v1/sweeps", json={**SPEC, "shapes": [{"name": "X", "n": 64, "k": 100}]})
    assert bad_k.status_code == 422 and bad_k.json()["error"]["fields"][0]["field"] == "shapes.0.k"
    assert client.get("/v1/sweeps").json()["total"] == 0  # nothing was half-created

    first = client.post("/v1/sweeps", json=SPEC, headers={"Idempotency-Key": "slice-1"})
    assert first.status_code == 202, first.text
    body = first.json()
    assert body["tasks"]["total"] == 2 * 2 * 2
    again = client.post("/v1/sweeps", json=SPEC, headers={"Idempotency-Key": "slice-1"})
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    conflict = client.post("/v1/sweeps", json={**SPEC, "m": [1]}, headers={"Idempotency-Key": "slice-1"})
    assert conflict.status_code == 409
    assert client.get("/v1/sweeps").json()["total"] == 1

    status = _wait_done(reader, body["id"])
    assert status["status"] == "done", status
    assert status["tasks"] == {"total": 8, "queued": 0, "running": 0, "done": 8, "failed": 0, "cancelled": 0}

    winners = reader.get("/v1/winners", params={"arch": "host", "phase": "decode"}).json()["items"]
    assert len(winners) == 8
    for winner in winners:
        assert winner["median_us"] > 0 and winner["variant"].startswith("MX4/KB")
        # a decided winner is faster than its runner-up; a tie may go to the incumbent or the simpler variant
        assert (
            winner["runner_up_median_us"] is None
            or not winner["decided"]
            or (winner["runner_up_median_us"] >= winner["median_us"])
        )
        assert winner["decided"] or winner["variant"] in winner["tie_group"]
    q8_only = reader.get("/v1/winners", params={"format": "Q8_0", "m": 2}).json()["items"]
    assert {(w["format"], w["m"]) for w in q8_only} == {("Q8_0", 2)} and len(q8_only) == 2

    assert reader.post("/v1/tables", json={"arch": "host", "phase": "decode"}).status_code == 403
    # tb-decode's variants carry seven parameters: its own struct table (the manifest's [table]), not
    # Llaminar's KB/TW config, which refuses them
    request = {"arch": "host", "phase": "decode", "dialect": "struct-table", "kernel": "tb-decode"}
    llaminar = client.post("/v1/tables", json={**request, "dialect": "llaminar-rocm-decode", "kernel": None})
    assert llaminar.status_code == 422 and "not of the form KB{kb}/TW{tw}" in llaminar.text
    table = client.post("/v1/tables", json=request)
    assert table.status_code == 201, table.text
    item = table.json()
    assert item["metrics"]["coverage"] == 1.0
    inc = reader.get(f"/v1/tables/{item['id']}/inc")
    assert inc.status_code == 200 and "#pragma once" in inc.text

    header = tmp_path / "check.inc"
    header.write_text(inc.text)
    subprocess.run(["c++", "-std=c++17", "-fsyntax-only", "-x", "c++", str(header)], check=True, timeout=120)
    codebook = {"Q8_0": 19, "Q4_0": 0}
    points = [(codebook[w["format"]], w["m"], w["n"], w["k"]) for w in winners]
    answers = _replay(inc.text, points, tmp_path)

    def config(variant: str) -> tuple[int, ...]:
        return tuple(int("".join(c for c in part if c.isdigit())) for part in variant.split("/"))

    # the compiled table answers what the service says it answers, and nowhere worse than the overlay
    # threshold (2%) over the measured best (a first table: no incumbent, ties take the measured best)
    entries = {
        (e["codebook"], e["m"], e["n"], e["k"]): e
        for e in reader.get(f"/v1/tables/{item['id']}").json()["entries"]
    }
    for point, answer in zip(points, answers, strict=True):
        assert answer == config(entries[point]["variant"]), (point, answer)
        regret = entries[point]["regret"]
        assert regret is not None and regret <= 0.02 + 1e-9, entries[point]

    same = client.post("/v1/tables", json=request).json()
    assert same["id"] == item["id"]  # unchanged winners: no new version
    latest = reader.get(
        "/v1/tables/latest",
        params={"arch": "host", "phase": "decode", "dialect": "struct-table", "kernel": "tb-decode"},
    )
    assert latest.text == inc.text


def test_cli_sweep_submit_wait(live_server: LiveServer, tmp_path: Path) -> None:
    token = _token(live_server, "submit")
    spec_file = tmp_path / "spec.json"
    import json

    spec_file.write_text(json.dumps({**SPEC, "formats": ["Q4_0"], "m": [1]}))
    env_token = {**live_server.env, "TUNEBASE_TOKEN": token}
    live_server.env = env_token
    result = live_server.cli("sweep", "submit", str(spec_file), "--wait", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "done"
    spec_file.write_text(json.dumps({**SPEC, "phase": "sideways"}))
    bad = live_server.cli("sweep", "submit", str(spec_file))
    assert bad.returncode == 2 and "phase" in bad.stderr
