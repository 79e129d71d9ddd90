"""End to end over a real server: import trainer CSVs, generate decode/prefill/json tables, diff versions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from sqlalchemy import create_engine, func, select

from service.db.models import Measurement, Winner
from tests.conftest import LiveServer
from tests.imports.test_llaminar_data import decode_csv, prefill_csv


def _token(server: LiveServer) -> dict[str, str]:
    made = server.cli("token", "create", "--name", "ci", "--scopes", "read,submit")
    assert made.returncode == 0, made.stderr
    server.env["TUNEBASE_TOKEN"] = made.stdout.strip()
    return {"Authorization": f"Bearer {made.stdout.strip()}"}


def _count(url: str) -> tuple[int, int]:
    engine = create_engine(url)
    with engine.connect() as c:
        measurements = c.scalar(
            select(func.count()).select_from(Measurement).where(Measurement.source == "llaminar-csv")
        )
        winners = c.scalar(select(func.count()).select_from(Winner))
    engine.dispose()
    return int(measurements or 0), int(winners or 0)


def test_import_generate_and_diff(live_server: LiveServer, tmp_path: Path) -> None:
    headers = _token(live_server)
    pre, dec = tmp_path / "rocm_prefill.csv", tmp_path / "rocm_decode.csv"
    pre.write_text(prefill_csv())
    dec.write_text(decode_csv())

    # A bad file among good ones: exit 2, line numbers named, nothing stored.
    bad = tmp_path / "bad.csv"
    bad.write_text(prefill_csv(("Q8_0",), (64,)).replace(",64,17408,", ",-64,17408,", 1))
    run = live_server.cli("import", "llaminar-csv", str(pre), str(bad), "--arch", "gfx906")
    assert run.returncode == 2
    assert "bad.csv:2: m=-64 must be >= 1" in run.stderr.replace("\n", " ") or "bad.csv:2" in run.stderr
    assert _count(live_server.database_url) == (0, 0)

    run = live_server.cli("import", "llaminar-csv", str(pre), str(dec), "--arch", "gfx906", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    # prefill: 3 formats x 2 M x 6 shapes x 4 variants; decode: 2 x 2 x 6 x 4
    assert result["measurements"] == 144 + 96 and result["points"] == 36 + 24 == result["winners"]
    assert _count(live_server.database_url) == (240, 60)
    rows = httpx.get(f"{live_server.url}/v1/results", params={"limit": 500}, headers=headers).json()["items"]
    # the trainer reports no median: its min is what median_us holds, and each row says so
    assert len(rows) == 240
    assert all(r["point_estimate"] == "min" and r["median_us"] == r["min_us"] for r in rows)

    # The API answers 422 with field paths for bad input too.
    r = httpx.post(
        f"{live_server.url}/v1/imports/llaminar-csv",
        json={"arch": "gfx999", "files": [{"name": "x.csv", "content": "a"}]},
        headers=headers,
    )
    assert r.status_code == 422 and r.json()["error"]["fields"][0]["field"] == "arch"

    ids: dict[str, int] = {}
    for phase, dialect in (
        ("decode", "llaminar-rocm-decode"),
        ("prefill", "llaminar-rocm-prefill"),
        ("prefill", "json"),
    ):
        out = tmp_path / f"{phase}-{dialect}.inc"
        run = live_server.cli(
            "table",
            "generate",
            "--arch",
            "gfx906",
            "--phase",
            phase,
            "--dialect",
            dialect,
            "--output",
            str(out),
        )
        assert run.returncode == 0, run.stderr
        ids[f"{phase}/{dialect}"] = json.loads(run.stdout[: run.stdout.rindex("}") + 1])["id"]
        assert out.read_text().strip()
    prefill_text = (tmp_path / "prefill-llaminar-rocm-prefill.inc").read_text()
    assert "selectROCmNativeVNNIPrefillGenerated" in prefill_text and "phase: prefill" in prefill_text
    assert "codebook 5 (Q4_1,Q4_K)" in prefill_text or "CB=5" in prefill_text
    latest = httpx.get(
        f"{live_server.url}/v1/tables/latest",
        params={"arch": "gfx906", "phase": "prefill", "dialect": "llaminar-rocm-prefill"},
        headers=headers,
    )
    assert latest.status_code == 200 and latest.text == prefill_text

    r = httpx.post(
        f"{live_server.url}/v1/tables",
        json={"arch": "gfx906", "phase": "decode", "dialect": "llaminar-rocm-prefill"},
        headers=headers,
    )
    assert r.status_code == 422 and r.json()["error"]["fields"][0]["field"] == "phase"

    # New measurements change winners; the next prefill version diffs against the first.
    changed = tmp_path / "rocm_prefill_2.csv"
    changed.write_text(prefill_csv(("Q8_0",), (64, 600), salt="rerun"))
    assert live_server.cli("import", "llaminar-csv", str(changed), "--arch", "gfx906").returncode == 0
    run = live_server.cli(
        "table", "generate", "--arch", "gfx906", "--phase", "prefill", "--dialect", "llaminar-rocm-prefill"
    )
    assert run.returncode == 0, run.stderr
    second = json.loads(run.stdout)
    first = ids["prefill/llaminar-rocm-prefill"]
    assert second["id"] != first and second["parent_id"] == first

    diff = httpx.get(
        f"{live_server.url}/v1/tables/{second['id']}/diff", params={"base": first}, headers=headers
    ).json()
    assert diff["base"] == first and diff["changed"] and not diff["added"] and not diff["removed"]
    # only Q8_0 (codebook 19) was re-measured; another codebook may move only where its fallback is the
    # surrogate, whose time model is pooled over codebooks (service/tables/surrogate.py) — nowhere else
    inc = httpx.get(f"{live_server.url}/v1/tables/{second['id']}/inc", headers=headers).text
    pooled = {int(c) for c in re.findall(r"codebook (\d+): surrogate", inc)}
    assert 19 in {e["codebook"] for e in diff["changed"]}
    for e in diff["changed"]:
        assert e["codebook"] == 19 or e["codebook"] in pooled, (e, pooled)
        assert (
            e["before"]["variant"] != e["after"]["variant"] or e["before"]["source"] != e["after"]["source"]
        )
    parent = httpx.get(f"{live_server.url}/v1/tables/{second['id']}/diff", headers=headers).json()
    assert parent["base"] == first and parent["counts"] == diff["counts"]
    run = live_server.cli("table", "diff", str(first), str(second["id"]))
    assert (
        run.returncode == 0 and f"table {first} -> {second['id']}" in run.stdout and "changed" in run.stdout
    )
    bad_base = httpx.get(
        f"{live_server.url}/v1/tables/{second['id']}/diff",
        params={"base": ids["decode/llaminar-rocm-decode"]},
        headers=headers,
    )
    assert bad_base.status_code == 422 and bad_base.json()["error"]["fields"][0]["field"] == "base"
