"""Tables and filters per kernel package on a real database (SQLite and Postgres).

Measurements of the uploaded example package (rowsplit-gemv) and of the built-in tb-decode share the same
points; winners are refreshed per package, a struct-table `.inc` is generated from the stored rowsplit winners
and read back by an independently compiled program, and every filter (API, dashboard, CLI) returns one
package's rows.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from kernels.formats.registry import FORMATS
from kernels.packages.archive import read_folder
from kernels.packages.loader import builtin_packages
from service.api.app import create_app
from service.auth import create_token
from service.config import Settings, get_settings
from service.db.models import Dispatch, Measurement, TableVersion, Variant, Winner
from service.db.session import session_scope
from service.kernel_store import store_package
from service.statistics.summary import summarize_ns
from service.tables.nightly import regenerate_all
from service.tables.versions import generate_and_store
from service.winners import refresh_point
from tests.conftest import start_server, stop_server

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "rowsplit-gemv"
SHAPES = {"Wide": (8192, 1024), "Square": (2048, 2048), "Tall": (1024, 4096)}
MS = (1, 2)
PACKAGES = {
    "rowsplit-gemv": {"R1/U1": 1.3, "R2/U2": 1.0, "R4/U1": 1.15, "R8/U2": 0.9},
    "tb-decode": {"MX4/KB1/RW1/U4/RG1/PG0/PP0": 1.1, "MX4/KB4/RW2/U4/RG1/PG0/PP0": 1.0},
}


def _time_factor(variant: str, fmt: str, m: int, n: int, k: int, base: float) -> float:
    """Deterministic per point: the winner depends on the shape, so the table has decisions to make."""
    bias = {"Wide": "R8/U2", "Square": "R2/U2", "Tall": "R4/U1"}
    name = next(s for s, (sn, sk) in SHAPES.items() if (sn, sk) == (n, k))
    return base * (0.7 if bias[name] == variant else 1.0) * (1.0 + 0.05 * m) * (1.1 if fmt == "Q8_0" else 1.0)


def _populate(session: Session) -> str:
    """Store the example package and measurements of both packages; refresh winners per package."""
    stored = store_package(session, read_folder(EXAMPLE), "tests")
    versions = {"rowsplit-gemv": stored.package.version, "tb-decode": builtin_packages()["tb-decode"].version}
    rng = np.random.default_rng(12)
    for kernel, variants in PACKAGES.items():
        for name in variants:
            session.add(Variant(family=kernel, name=name, params={}, declared_order=0))
    session.flush()
    variant_ids = {(v.family, v.name): v.id for v in session.scalars(select(Variant))}
    for kernel, variants in PACKAGES.items():
        for fmt in ("Q8_0", "Q4_0"):
            for shape, (n, k) in SHAPES.items():
                for m in MS:
                    for name, base in variants.items():
                        median = 10.0 * _time_factor(name, fmt, m, n, k, base) * n * k / 2**23
                        ns = [int(1000 * median * np.exp(0.01 * rng.standard_normal())) for _ in range(30)]
                        summary = summarize_ns(ns)
                        assert summary is not None
                        row = Measurement(
                            variant_id=variant_ids[(kernel, name)], arch="host", phase="decode", format=fmt,
                            codebook=FORMATS[fmt].codebook, shape=shape, n=n, k=k, m=m, source="sweep",
                            kernel=kernel, kernel_version=versions[kernel], source_hash="s", toolchain="cc",
                            n_dispatches=len(ns), parity_pass=True, median_us=summary.median_us,
                        )  # fmt: skip
                        session.add(row)
                        session.flush()
                        session.execute(
                            insert(Dispatch),
                            [{"measurement_id": row.id, "seq": i, "device_ns": t} for i, t in enumerate(ns)],
                        )
                    assert refresh_point(session, "host", "decode", fmt, m, n, k, kernel=kernel) is not None
    return stored.package.version


@pytest.fixture
def populated(
    migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str]]:
    monkeypatch.setenv("TUNEBASE_ARTIFACT_DIR", str(tmp_path / "artifacts"))  # uploaded packages land here
    get_settings.cache_clear()
    with session_scope(migrated_url) as session:
        version = _populate(session)
    yield migrated_url, version
    get_settings.cache_clear()


def _params(variant: str) -> tuple[int, int]:
    match = re.fullmatch(r"R(\d+)/U(\d+)", variant)
    assert match is not None, variant
    return int(match.group(1)), int(match.group(2))


def test_struct_table_from_stored_winners_compiles_and_replays(
    populated: tuple[str, str], tmp_path: Path
) -> None:
    url, version = populated
    with session_scope(url) as session:
        table = generate_and_store(session, "host", "decode", "struct-table", "rowsplit-gemv")
        assert (table.kernel, table.kernel_version) == ("rowsplit-gemv", version)
        content, entries = table.content, list(table.entries)
        winners = {
            (w.codebook, w.m, w.n, w.k): w.variant
            for w in session.scalars(select(Winner).where(Winner.kernel == "rowsplit-gemv"))
        }
        builtin = generate_and_store(session, "host", "decode", "struct-table")
        assert builtin.kernel == "tb-decode" and "TbDecodeConfig" in builtin.content
        tb_decode = builtin_packages()["tb-decode"]
        for entry in builtin.entries:  # no rowsplit winner leaks in: every entry is a tb-decode variant
            tb_decode.parse(entry["variant"], "host")
        with pytest.raises(ValueError, match="cannot express tb-decode's variants"):
            generate_and_store(session, "host", "decode", "llaminar-rocm-decode")
        with pytest.raises(ValueError, match="use struct-table or json"):
            generate_and_store(session, "host", "decode", "llaminar-rocm-decode", "rowsplit-gemv")
        again = generate_and_store(session, "host", "decode", "struct-table", f"rowsplit-gemv@{version[:10]}")
        assert again.id == table.id  # same winners, same text: no new version
    assert len(entries) == len(winners) == 2 * len(SHAPES) * len(MS)
    assert {(e["codebook"], e["m"], e["n"], e["k"]) for e in entries} == set(winners)
    assert all(e["winner"] == winners[(e["codebook"], e["m"], e["n"], e["k"])] for e in entries)
    assert {e["variant"] for e in entries} >= {"R8/U2", "R2/U2"}
    # an engine's view: include the stored text and look every measured point up
    (tmp_path / "rowsplit.inc").write_text(content)
    rows = "\n".join(f"{{{e['codebook']}, {e['m']}, {e['n']}, {e['k']}}}," for e in entries)
    (tmp_path / "main.cpp").write_text(
        '#include "rowsplit.inc"\n#include <cstdio>\nnamespace g = tunebase::kernels::rowsplit_gemv;\n'
        f"int main() {{ static const int q[][4] = {{{rows}}};\n"
        "  for (const auto &p : q) { g::RowsplitGemvConfig c{};\n"
        "    if (!g::selectRowsplitGemv(p[0], p[1], p[2], p[3], c)) return 3;\n"
        '    std::printf("%d %d\\n", c.ROWS, c.UNROLL); } }\n'
    )
    build = subprocess.run(
        ["c++", "-std=c++17", str(tmp_path / "main.cpp"), "-o", str(tmp_path / "main")],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0
    assert [tuple(map(int, line.split())) for line in run.stdout.splitlines()] == [
        _params(e["variant"]) for e in entries
    ]


def test_nightly_generates_each_package_its_dialects(populated: tuple[str, str]) -> None:
    url, _ = populated
    with session_scope(url) as session:
        results = regenerate_all(session)
        assert not [r.detail for r in results if r.status == "failed"]
        assert {(r.kernel, r.dialect, r.status) for r in results} == {
            ("rowsplit-gemv", "json", "stored"),
            ("rowsplit-gemv", "struct-table", "stored"),
            ("tb-decode", "json", "stored"),
            ("tb-decode", "struct-table", "stored"),  # its variants do not fit Llaminar's KB/TW fields
        }
        stored = {(t.kernel, t.dialect): t for t in session.scalars(select(TableVersion))}
        doc = json.loads(stored[("rowsplit-gemv", "json")].content)
        assert doc["config_fields"] == ["ROWS", "UNROLL"] and doc["kernel"]["name"] == "rowsplit-gemv"
        assert "TbDecodeConfig" in stored[("tb-decode", "struct-table")].content
        assert {r.status for r in regenerate_all(session)} == {"unchanged_winners"}


def _client(url: str, tmp_path: Path) -> tuple[TestClient, str]:
    settings = Settings(home=tmp_path, database_url=url, artifact_dir=get_settings().resolved_artifact_dir)
    with session_scope(url) as session:
        token = create_token(session, "t", ["submit"])
    app = create_app(settings, start_embedded_worker=False)
    return TestClient(app, headers={"Authorization": f"Bearer {token}"}), token


def _kernels(items: list[dict[str, Any]]) -> set[str]:
    return {item["kernel"] for item in items}


def test_api_and_dashboard_filter_by_kernel(populated: tuple[str, str], tmp_path: Path) -> None:
    url, version = populated
    client, _ = _client(url, tmp_path)
    every = client.get("/v1/winners").json()
    assert every["total"] == 2 * 2 * len(SHAPES) * len(MS) and _kernels(every["items"]) == set(PACKAGES)
    for kernel, variants in PACKAGES.items():
        page = client.get("/v1/winners", params={"kernel": kernel}).json()
        assert page["total"] == 2 * len(SHAPES) * len(MS)
        assert _kernels(page["items"]) == {kernel} and {w["variant"] for w in page["items"]} <= set(variants)
        results = client.get("/v1/results", params={"kernel": kernel, "limit": 500}).json()
        assert results["total"] == 2 * len(SHAPES) * len(MS) * len(variants)
        assert _kernels(results["items"]) == {kernel}
    rowsplit = client.get("/v1/winners", params={"kernel": "rowsplit-gemv"}).json()["items"]
    assert {w["kernel_version"] for w in rowsplit} == {version}

    made = client.post(
        "/v1/tables", json={"arch": "host", "dialect": "struct-table", "kernel": "rowsplit-gemv"}
    )
    assert made.status_code == 201, made.text
    assert (made.json()["kernel"], made.json()["kernel_version"]) == ("rowsplit-gemv", version)
    builtin = client.post("/v1/tables", json={"arch": "host"})  # default dialect: the one that fits
    assert builtin.status_code == 201, builtin.text
    assert (builtin.json()["kernel"], builtin.json()["dialect"]) == ("tb-decode", "struct-table")
    listed = client.get("/v1/tables", params={"kernel": "rowsplit-gemv"}).json()
    assert [t["id"] for t in listed["items"]] == [made.json()["id"]]
    latest = client.get(
        "/v1/tables/latest", params={"arch": "host", "dialect": "struct-table", "kernel": "rowsplit-gemv"}
    )
    assert latest.status_code == 200 and "selectRowsplitGemv(" in latest.text
    for body, reason in (
        ({"kernel": "no-such-kernel", "dialect": "struct-table"}, "no kernel package no-such-kernel"),
        ({"kernel": "rowsplit-gemv", "dialect": "llaminar-rocm-decode"}, "use struct-table or json"),
        ({"kernel": "Bad Name", "dialect": "json"}, "pattern"),
    ):
        bad = client.post("/v1/tables", json={"arch": "host", **body})
        assert bad.status_code == 422, bad.text
        assert "kernel" in bad.text and reason in bad.text
    with session_scope(url) as session:
        assert session.scalar(select(TableVersion.id).where(TableVersion.id > builtin.json()["id"])) is None

    assert "struct-table · rowsplit-gemv</h2>" in client.get("/dashboard/tables").text
    page = client.get("/", params={"kernel": "rowsplit-gemv"}).text
    assert 'data-kernel="rowsplit-gemv"' in page and 'data-kernel="tb-decode"' not in page
    assert "R8/U2" in page and "MX4/KB4/RW2/U4/RG1/PG0/PP0" not in page
    point = client.get(
        "/dashboard/point",
        params={
            "arch": "host",
            "phase": "decode",
            "format": "Q4_0",
            "m": 1,
            "n": 8192,
            "k": 1024,
            "kernel": "tb-decode",
        },
    ).text
    assert "MX4/KB1/RW1/U4/RG1/PG0/PP0" in point and "R1/U1" not in point


def test_cli_winners_and_table_generate_by_kernel(
    populated: tuple[str, str], tmp_path: Path, artifact_dir: Path
) -> None:
    url, _ = populated
    # a broker URL: this test needs no worker, so `serve` starts none (nothing is ever queued)
    server = start_server(
        tmp_path,
        url,
        get_settings().resolved_artifact_dir,
        {"TUNEBASE_BROKER_URL": "redis://127.0.0.1:6379/15"},
    )
    try:
        with session_scope(url) as session:
            token = create_token(session, "cli", ["submit"])
        server.env["TUNEBASE_TOKEN"] = token
        listed = server.cli("winners", "--kernel", "rowsplit-gemv", "--json")
        assert listed.returncode == 0, listed.stderr
        items = json.loads(listed.stdout)
        assert len(items) == 2 * len(SHAPES) * len(MS) and _kernels(items) == {"rowsplit-gemv"}
        out = tmp_path / "rowsplit.inc"
        made = server.cli(
            "table", "generate", "--arch", "host", "--dialect", "struct-table", "--kernel", "rowsplit-gemv",
            "--output", str(out),
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        assert "selectRowsplitGemv(" in out.read_text()
        # without --dialect, a package's table defaults to the dialect that fits any package
        default = server.cli("table", "generate", "--arch", "host", "--kernel", "rowsplit-gemv")
        assert default.returncode == 0 and json.loads(default.stdout)["dialect"] == "struct-table"
        wrong = ("--kernel", "rowsplit-gemv", "--dialect", "llaminar-rocm-decode")
        bad = server.cli("table", "generate", "--arch", "host", *wrong)
        assert bad.returncode == 2 and "struct-table" in bad.stdout + bad.stderr
    finally:
        stop_server(server)
