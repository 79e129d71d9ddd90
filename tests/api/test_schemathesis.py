"""Schemathesis fuzzes every operation of the OpenAPI document against a live server: no 5xx anywhere.

The server runs without its embedded worker, so fuzzed sweeps are stored and listed but never executed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.conftest import REPO, LiveServer, _postgres_database, start_server, stop_server

MAX_EXAMPLES = "6"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.slow])])
def api_server(request: pytest.FixtureRequest, tmp_path: Path, artifact_dir: Path) -> Iterator[LiveServer]:
    """SQLite in `make test`; the Postgres run doubles the longest test, so it is in `make test-full`."""
    from service.db.migrate import upgrade

    sqlite_url = f"sqlite:///{tmp_path / 'fuzz.sqlite3'}"
    urls = iter([sqlite_url]) if request.param == "sqlite" else _postgres_database()
    url = next(urls)
    upgrade(url)
    server = start_server(tmp_path, url, artifact_dir, {"TUNEBASE_EMBEDDED_WORKER": "false"})
    try:
        yield server
    finally:
        stop_server(server)
        for _ in urls:  # finish the generator: drops the Postgres database
            pass


def test_openapi_fuzz_has_no_server_errors(api_server: LiveServer, tmp_path: Path) -> None:
    token = api_server.cli("token", "create", "--name", "fuzz", "--scopes", "read,submit").stdout.strip()
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or "st"
    report = tmp_path / "junit.xml"
    result = subprocess.run(
        [
            st,
            "run",
            f"{api_server.url}/openapi.json",
            "--checks",
            "not_a_server_error",
            "--max-examples",
            MAX_EXAMPLES,
            "--phases",
            "examples,fuzzing",
            "--seed",
            "1",
            "--workers",
            "1",
            "--max-time",
            "90",
            "--header",
            f"Authorization: Bearer {token}",
            # compiles every variant of a package before it answers (minutes by design); its 4xx and its
            # results are covered by tests/packages/test_prescreen.py
            "--exclude-path",
            "/v1/kernels/{name}/{version}/analyze",
            "--report",
            "junit",
            "--report-junit-path",
            str(report),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, (
        output[-6000:] + "\nserver log:\n" + (api_server.home / "server.log").read_text()[-4000:]
    )
    # the time budget may end fuzzing early; the JUnit report proves operations were exercised and none failed
    suite = ElementTree.parse(report).getroot()
    cases = suite.findall(".//testcase")
    assert len(cases) >= 20, output[-3000:]
    failed = [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
    assert failed == [], failed
