"""A team's own kernel, end to end over HTTP: push the example package, sweep it on the host backend through a
live `tunebase serve` (embedded worker), read its winners, generate a struct-table .inc, compile it and replay
every winner through the compiled lookup. The built-in package's winners stay apart."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from kernels.packages.archive import read_folder, write_archive
from tests.conftest import LiveServer

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "rowsplit-gemv"
SHAPES = [{"name": "E2E_Wide", "n": 192, "k": 512}, {"name": "E2E_Tall", "n": 64, "k": 1024}]


def _token(server: LiveServer) -> str:
    made = server.cli("token", "create", "--name", "team-ci", "--scopes", "submit")
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def _wait(client: httpx.Client, sweep_id: int, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = client.get(f"/v1/sweeps/{sweep_id}").json()
        if status["status"] in ("done", "failed", "cancelled"):
            return status
        time.sleep(0.3)
    raise AssertionError(f"sweep {sweep_id} did not finish: {status}")


def test_push_sweep_winners_table(live_server: LiveServer, tmp_path: Path) -> None:
    client = httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Bearer {_token(live_server)}"}, timeout=60
    )
    pushed = client.post(
        "/v1/kernels",
        content=write_archive(read_folder(EXAMPLE)),
        headers={"Content-Type": "application/gzip"},
    )
    assert pushed.status_code == 201, pushed.text
    package = pushed.json()
    assert package["name"] == "rowsplit-gemv" and package["variants"] == 11
    assert package["invalid"] == [{"point": "R8/U4", "rule": "ROWS * UNROLL <= 16"}]

    spec = {
        "arch": "host", "phase": "decode", "kernel": "rowsplit-gemv", "formats": ["Q8_0", "Q4_0"],
        "shapes": SHAPES, "m": [1, 3], "min_dispatches": 5, "labels": {"ci": "package-e2e"},
    }  # fmt: skip
    created = client.post("/v1/sweeps", json=spec)
    assert created.status_code == 202, created.text
    assert created.json()["kernel"] == "rowsplit-gemv"
    assert created.json()["kernel_version"] == package["version"]
    status = _wait(client, created.json()["id"])
    assert status["status"] == "done" and status["parity_failures"] == 0, status

    # the built-in package on the same points: its winners must not mix with the example's
    builtin = {
        **spec,
        "kernel": None,
        "variants": ["MX4/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB4/RW2/U2/RG1/PG0/PP0"],
        "labels": {"ci": "builtin"},
    }
    builtin.pop("kernel")
    done = _wait(client, client.post("/v1/sweeps", json=builtin).json()["id"])
    assert done["status"] == "done"

    results = client.get("/v1/results", params={"kernel": "rowsplit-gemv", "limit": 500}).json()["items"]
    assert len(results) == 2 * 2 * 2 * 11 and {r["kernel"] for r in results} == {"rowsplit-gemv"}
    assert all(r["kernel_version"] == package["version"] for r in results)
    winners = client.get("/v1/winners", params={"kernel": "rowsplit-gemv", "arch": "host"}).json()["items"]
    assert len(winners) == 2 * 2 * 2
    assert all(w["variant"].startswith("R") and w["kernel"] == "rowsplit-gemv" for w in winners)
    others = client.get("/v1/winners", params={"kernel": "tb-decode", "arch": "host"}).json()["items"]
    assert len(others) == 8 and all(w["variant"].startswith("MX4/KB") for w in others)

    table = client.post(
        "/v1/tables",
        json={"arch": "host", "phase": "decode", "dialect": "struct-table", "kernel": "rowsplit-gemv"},
    )
    assert table.status_code in (200, 201), table.text
    inc = client.get(f"/v1/tables/{table.json()['id']}/inc").text
    assert "struct RowsplitGemvConfig" in inc
    header = tmp_path / "rowsplit.inc"
    header.write_text(inc)
    entries = client.get(f"/v1/tables/{table.json()['id']}").json()["entries"]
    points = [(e["codebook"], e["m"], e["n"], e["k"]) for e in entries]
    assert sorted(points) == sorted((w["codebook"], w["m"], w["n"], w["k"]) for w in winners)
    select = "tunebase::kernels::rowsplit_gemv::selectRowsplitGemv"
    calls = "\n".join(
        f"  if (!{select}({cb}, {m}, {n}, {k}, c)) return 3;\n"
        f'  std::printf("R%d/U%d\\n", (int)c.ROWS, (int)c.UNROLL);'
        for cb, m, n, k in points
    )
    program = tmp_path / "replay.cpp"
    program.write_text(
        f'#include <cstdio>\n#include "{header}"\nint main() {{\n'
        f"  tunebase::kernels::rowsplit_gemv::RowsplitGemvConfig c{{}};\n{calls}\n  return 0;\n}}\n"
    )
    binary = tmp_path / "replay"
    subprocess.run(["c++", "-std=c++17", "-O0", str(program), "-o", str(binary)], check=True, timeout=120)
    ran = subprocess.run([str(binary)], capture_output=True, text=True, check=True, timeout=30)
    replay = ran.stdout.split()
    # the compiled lookup gives the table's stored choice at every key, and each is a variant of the package
    assert replay == [e["variant"] for e in entries]
    assert set(replay) <= {r["variant"] for r in results}
