"""Schemathesis fuzzes the OpenAPI document against a live server with every check and every phase
(examples, coverage, fuzzing, stateful): no server error, no undocumented status or content type, no
response off its schema, every $ref resolved.

`make test` runs a short pass on SQLite. `make test-full` runs five minutes on Postgres holding more
than a million dispatch rows (the size at which the pool and streaming defects showed). The server
runs without its embedded worker, so fuzzed sweeps are stored and listed but never executed. The
token has scope submit: an admin token would let the stateful phase revoke itself.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

import pytest

from service.db.session import session_scope
from tests.conftest import REPO, LiveServer, _postgres_database, start_server, stop_server
from tests.reliability.seed import seed_dispatches

CONFIG = Path(__file__).with_name("schemathesis.toml")
SHORT = {
    "max_examples": "6",
    "max_time": "60",
}  # make test; LONG (Postgres, a million rows) in make test-full
LONG = {"max_examples": "50", "max_time": "300"}
SEED_MEASUREMENTS, SEED_ROWS_EACH = 500, 2_100  # 1,050,000 dispatch rows


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.slow])])
def api_server(request: pytest.FixtureRequest, tmp_path: Path, artifact_dir: Path) -> Iterator[LiveServer]:
    from service.db.migrate import upgrade

    sqlite_url = f"sqlite:///{tmp_path / 'fuzz.sqlite3'}"
    urls = iter([sqlite_url]) if request.param == "sqlite" else _postgres_database()
    url = next(urls)
    upgrade(url)
    if request.param == "postgres":
        with session_scope(url) as session:
            seed_dispatches(session, SEED_MEASUREMENTS, SEED_ROWS_EACH, label="fuzz")
    server = start_server(tmp_path, url, artifact_dir, {"TUNEBASE_EMBEDDED_WORKER": "false"})
    server.budget = SHORT if request.param == "sqlite" else LONG  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        stop_server(server)
        for _ in urls:  # finish the generator: drops the Postgres database
            pass


def test_openapi_fuzz_finds_no_failures(api_server: LiveServer, tmp_path: Path) -> None:
    budget: dict[str, str] = api_server.budget  # type: ignore[attr-defined]
    token = api_server.cli("token", "create", "--name", "fuzz", "--scopes", "read,submit").stdout.strip()
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or "st"
    report = tmp_path / "junit.xml"
    argv = [
        st, "--config-file", str(CONFIG), "run", f"{api_server.url}/openapi.json",
        "--checks", "all",
        "--phases", "examples,coverage,fuzzing,stateful",
        "--max-examples", budget["max_examples"],
        "--max-time", budget["max_time"],
        "--seed", "1",
        "--workers", "1",
        "--header", f"Authorization: Bearer {token}",
        # compiles every variant of a package before it answers (minutes by design); its 4xx and its
        # results are covered by tests/packages/test_prescreen.py
        "--exclude-path", "/v1/kernels/{name}/{version}/analyze",
        "--report", "junit", "--report-junit-path", str(report),
    ]  # fmt: skip
    result = subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=int(budget["max_time"]) + 240, check=False
    )
    output = result.stdout + result.stderr
    server_log = (api_server.home / "server.log").read_text()
    assert result.returncode == 0, output[-8000:] + "\nserver log:\n" + server_log[-3000:]
    assert "Unresolvable references" not in output, output[-4000:]
    # the time budget may end fuzzing early; the JUnit report proves operations were exercised and none failed
    suite = ElementTree.parse(report).getroot()
    cases = suite.findall(".//testcase")
    assert len(cases) >= 25, output[-3000:]
    failed = [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
    assert failed == [], failed
