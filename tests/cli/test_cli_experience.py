"""What a new user meets first: a sweep no worker serves, one-line errors with a hint, registry commands."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from service.cli import app
from service.db.migrate import upgrade
from tests.conftest import LiveServer, free_port, start_server, stop_server

HOST_SPEC = {
    "arch": "host",
    "phase": "decode",
    "formats": ["Q8_0"],
    "shapes": [{"name": "Exp_Small", "n": 128, "k": 256}],
    "m": [1],
    "variants": ["MX4/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB1/RW2/U4/RG1/PG0/PP0"],
    "min_dispatches": 5,
    "max_dispatches": 5,
}
NO_WORKER_SPEC = {**HOST_SPEC, "arch": "gfx906"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, artifact_dir: Path) -> Iterator[LiveServer]:
    home = tmp_path_factory.mktemp("experience")
    url = f"sqlite:///{home / 'experience.sqlite3'}"
    upgrade(url)
    live = start_server(home, url, artifact_dir, {"COLUMNS": "200"})
    token = live.cli("token", "create", "--name", "ci", "--scopes", "submit").stdout.strip()
    live.env = {**live.env, "TUNEBASE_TOKEN": token}
    try:
        yield live
    finally:
        stop_server(live)


def _spec(tmp_path: Path, spec: dict[str, Any]) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path)


def test_serve_prints_the_export_line(server: LiveServer) -> None:
    log = (server.home / "server.log").read_text()
    assert f"export TUNEBASE_URL={server.url}" in log.splitlines()[0]


def test_a_sweep_no_worker_serves_says_so_and_wait_honours_timeout(
    server: LiveServer, tmp_path: Path
) -> None:
    waited = server.cli("sweep", "submit", _spec(tmp_path, NO_WORKER_SPEC), "--wait", "--timeout", "2")
    assert waited.returncode == 4, waited.stderr
    assert "waiting: no live worker serves gfx906 (0 online)" in waited.stderr
    assert "embedded worker serves host (1)" in waited.stderr  # what does serve, and how to add one
    assert "still queued after --timeout 2 s" in waited.stderr and "Traceback" not in waited.stderr
    sweep_id = re.search(r"sweep (\d+):", waited.stderr)
    assert sweep_id is not None
    status = json.loads(server.cli("sweep", "status", sweep_id.group(1), "--json").stdout)
    assert status["status"] == "queued" and status["workers_online"] == 0
    assert status["warnings"] and "gfx906" in status["warnings"][0]

    done = json.loads(server.cli("sweep", "submit", _spec(tmp_path, HOST_SPEC), "--wait", "--json").stdout)
    assert done["status"] == "done" and done["warnings"] == [] and done["workers_online"] == 1
    cancelled = server.cli("sweep", "cancel", sweep_id.group(1))
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    after = json.loads(server.cli("sweep", "status", sweep_id.group(1), "--json").stdout)
    assert after["warnings"] == []  # nothing waits any more


def test_http_errors_are_one_line_with_a_hint(server: LiveServer) -> None:
    no_token_env = {k: v for k, v in server.env.items() if k != "TUNEBASE_TOKEN"}
    server_env, server.env = server.env, no_token_env
    try:
        anonymous = server.cli("sweep", "status", "1")
    finally:
        server.env = server_env
    assert anonymous.returncode == 1
    assert anonymous.stderr.strip().count("\n") == 0, anonymous.stderr
    assert anonymous.stderr.startswith("error: HTTP 401") and "TUNEBASE_TOKEN" in anonymous.stderr
    missing = server.cli("sweep", "status", "99999")
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr and "hint:" in missing.stderr
    prefill = server.cli("table", "generate", "--arch", "host", "--phase", "prefill")
    # the dialect follows --phase: the answer is about prefill winners, not a decode dialect mismatch
    assert prefill.returncode == 1 and "no winners for arch=host phase=prefill" in prefill.stderr


@pytest.mark.parametrize("url", ["http://127.0.0.1:{port}", "not-a-url", "http://[::1"])
def test_unreachable_url_is_one_line_and_debug_shows_the_traceback(url: str, tmp_path: Path) -> None:
    target = url.format(port=free_port())
    env = {"TUNEBASE_HOME": str(tmp_path), "COLUMNS": "100"}
    plain = CliRunner().invoke(app, ["sweep", "status", "1", "--url", target], env=env)
    assert plain.exit_code == 1, plain.output
    lines = plain.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the Tunebase API"), plain.output
    assert "hint:" in lines[0] and "TUNEBASE_URL" in lines[0]
    debug = CliRunner().invoke(app, ["--debug", "sweep", "status", "1", "--url", target], env=env)
    assert debug.exit_code != 0 and debug.exception is not None
    assert type(debug.exception).__name__ == "ApiUnreachable"


def test_formats_and_families_need_no_server(tmp_path: Path) -> None:
    env = {"TUNEBASE_HOME": str(tmp_path), "COLUMNS": "200"}
    formats = CliRunner().invoke(app, ["formats", "--json"], env=env)
    items = {f["name"]: f for f in json.loads(formats.output)}
    assert items["Q4_K"]["codebook"] == items["Q4_1"]["codebook"] == 5
    families = CliRunner().invoke(app, ["families", "--backend", "rocm", "--variants"], env=env)
    assert families.exit_code == 0, families.output
    assert "kb: split-K" in families.output and "pp: 1: software-pipelined" in families.output
    assert "MX{mx}/KB{kb}/RW{rw}/U{u}/RG{rg}/PG{pg}/PP{pp}" in families.output
    assert "MX4/KB4/RW2/U2/RG1/PG0/PP1" in families.output
    bad = CliRunner().invoke(app, ["families", "--backend", "tpu"], env=env)
    assert bad.exit_code == 2 and "--backend must be one of" in bad.output


def test_every_option_and_command_has_help() -> None:
    command: Any = typer.main.get_command(app)
    missing: list[str] = []

    def walk(node: Any, path: list[str]) -> None:
        if hasattr(node, "commands"):
            for name, sub in node.commands.items():
                walk(sub, [*path, name])
            return
        if not node.help:
            missing.append(" ".join(path))
        bare = [p.name for p in node.params if p.name != "help" and not getattr(p, "help", None)]
        missing.extend(f"{' '.join(path)} {name}" for name in bare)

    walk(command, [])
    assert command.commands and not missing, missing
