"""The CLI: exit code 2 on bad arguments; `--wait` fails CI on sweep or parity failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine, update
from typer.testing import CliRunner

from service.cli import app
from service.db.models import Measurement
from tests.conftest import LiveServer

SPEC = {
    "arch": "host",
    "phase": "decode",
    "formats": ["Q8_0"],
    "shapes": [{"name": "Cli_Small", "n": 128, "k": 256}],
    "m": [1],
    "variants": ["MX4/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB1/RW2/U4/RG1/PG0/PP0"],
    "min_dispatches": 5,
    "max_dispatches": 5,
}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["sweep", "status", "abc"], "Invalid value for 'sweep_id'"),
        (["sweep", "status", "0"], "Invalid value for 'sweep_id'"),
        (["sweep", "submit", "/nonexistent/spec.json"], "cannot read spec"),
        (["results", "--phase", "sideways"], "--phase must be decode or prefill"),
        (["results", "--limit", "0"], "--limit"),
        (["token", "create", "--name", "x", "--scopes", "root"], "scopes must be"),
        (
            ["observed", "report", "--arch", "host", "--format", "Q8_0", "--m", "0", "--n", "1", "--k", "1"],
            "--m",
        ),
        (["winners", "--bogus"], "--bogus"),
        (["dispatches"], "Missing argument 'measurement_id'"),
    ],
)
def test_bad_arguments_exit_2(argv: list[str], needle: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, argv, env={"TUNEBASE_HOME": str(tmp_path), "COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert needle in result.output


def test_submit_wait_and_scripts(live_server: LiveServer, tmp_path: Path) -> None:
    token = live_server.cli("token", "create", "--name", "ci", "--scopes", "submit").stdout.strip()
    live_server.env = {**live_server.env, "TUNEBASE_TOKEN": token, "COLUMNS": "200"}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC))

    done = live_server.cli("sweep", "submit", str(spec), "--wait", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["status"] == "done" and status["parity_failures"] == 0 and status["tasks"]["done"] == 1

    results = json.loads(live_server.cli("results", "--sweep", str(status["id"]), "--json").stdout)
    assert results["total"] == 2 and {r["variant"] for r in results["items"]} == {
        "MX4/KB1/RW1/U4/RG1/PG0/PP0",
        "MX4/KB1/RW2/U4/RG1/PG0/PP0",
    }
    measurement = results["items"][0]
    rows = live_server.cli("dispatches", str(measurement["id"]), "--csv").stdout.splitlines()
    assert rows[0] == "seq,device_ns,wall_ns,buffer_index" and len(rows) == 1 + measurement["n_dispatches"]
    listing = json.loads(live_server.cli("sweep", "list", "--json").stdout)
    assert [s["id"] for s in listing["items"]] == [status["id"]]
    human = live_server.cli("results", "--sweep", str(status["id"]))
    assert human.returncode == 0 and "MX4/KB1/RW2/U4/RG1/PG0/PP0" in human.stdout
    assert "host" in live_server.cli("devices").stdout
    assert json.loads(live_server.cli("profiles", "--json").stdout)["total"] >= 6
    seen = live_server.cli(
        "observed",
        "report",
        "--arch",
        "host",
        "--format",
        "Q8_0",
        "--m",
        "2",
        "--n",
        "64",
        "--k",
        "256",
        "--json",
    )
    assert seen.returncode == 0 and json.loads(seen.stdout)["count"] == 1
    bad_k = live_server.cli(
        "observed", "report", "--arch", "host", "--format", "Q8_0", "--m", "2", "--n", "64", "--k", "100"
    )
    assert bad_k.returncode == 2 and "k:" in bad_k.stderr

    # A variant whose output diverged from the reference: the sweep is done, but CI must fail.
    engine = create_engine(live_server.database_url)
    with engine.begin() as connection:
        connection.execute(
            update(Measurement).where(Measurement.id == measurement["id"]).values(parity_pass=False)
        )
    engine.dispose()
    failed_parity = live_server.cli("sweep", "status", str(status["id"]), "--wait", "--json")
    assert failed_parity.returncode == 3, failed_parity.stderr
    assert (
        json.loads(failed_parity.stdout)["parity_failures"] == 1 and "failed parity" in failed_parity.stderr
    )

    spec.write_text(json.dumps({**SPEC, "shapes": [{"name": "Huge", "n": 64, "k": 100}]}))
    rejected = live_server.cli("sweep", "submit", str(spec), "--wait")
    assert rejected.returncode == 2 and "shapes.0.k" in rejected.stderr
