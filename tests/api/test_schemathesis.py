"""Schemathesis fuzzes every operation of the OpenAPI document against a live server: no 5xx anywhere.

The server runs without its embedded worker, so fuzzed sweeps are stored and listed but never executed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, LiveServer, start_server, stop_server

MAX_EXAMPLES = "6"


@pytest.fixture
def api_server(migrated_url: str, tmp_path: Path, artifact_dir: Path) -> Iterator[LiveServer]:
    server = start_server(tmp_path, migrated_url, artifact_dir, {"TUNEBASE_EMBEDDED_WORKER": "false"})
    try:
        yield server
    finally:
        stop_server(server)


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
            "150",
            "--header",
            f"Authorization: Bearer {token}",
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
    assert "not_a_server_error" in output
