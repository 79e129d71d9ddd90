"""`tunebase kernel push|list|show|analyze` against a live `tunebase serve` (real HTTP, real compilers)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernels.packages.archive import read_folder
from kernels.packages.package import content_version
from tests.conftest import LiveServer, start_server, stop_server
from tests.packages.conftest import PACKAGE_DIR

SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@pytest.fixture
def server(migrated_url: str, tmp_path: Path, artifact_dir: Path) -> Iterator[LiveServer]:
    """`tunebase serve` without its embedded worker: package routes run no tasks."""
    live = start_server(tmp_path, migrated_url, artifact_dir, {"TUNEBASE_EMBEDDED_WORKER": "false"})
    try:
        yield live
    finally:
        stop_server(live)


def _token(server: LiveServer) -> dict[str, str]:
    created = server.cli("token", "create", "--name", "kernel-cli", "--scopes", "submit")
    assert created.returncode == 0, created.stderr
    return {**server.env, "TUNEBASE_TOKEN": created.stdout.strip()}


@SQLITE_ONLY
def test_push_list_show_analyze_and_bad_input(server: LiveServer, tmp_path: Path) -> None:
    server.env = _token(server)
    version = content_version(read_folder(PACKAGE_DIR))

    pushed = server.cli("kernel", "push", str(PACKAGE_DIR))
    assert pushed.returncode == 0, pushed.stderr
    assert (
        f"q8-rows@{version[:12]} stored: 7 variants (cuda 7, host 4, rocm 7), 1 invalid points"
        in pushed.stdout
    )
    again = server.cli("kernel", "push", str(PACKAGE_DIR), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["created"] is False

    listed = json.loads(server.cli("kernel", "list", "--json").stdout)
    assert {i["name"]: i["latest"] for i in listed["items"]}["q8-rows"] == version
    table = server.cli("kernel", "list").stdout
    assert "q8-rows" in table and "tb-decode" in table and "built-in" in table

    shown = server.cli("kernel", "show", "q8-rows")
    assert shown.returncode == 0, shown.stderr
    assert "VGPR_CAP = [0, 24]" in shown.stdout and "rows.hip" in shown.stdout

    analysed = server.cli(
        "kernel", "analyze", f"q8-rows@{version[:8]}", "--arch", "gfx906", "--variant", "R2/V0",
        "--variant", "R8/V0", "--json",
    )  # fmt: skip
    assert analysed.returncode == 0, analysed.stderr
    result = json.loads(analysed.stdout)
    assert [(i["variant"], i["ok"]) for i in result["items"]] == [("R2/V0", True), ("R8/V0", False)]
    assert "static assertion failed" in result["items"][1]["error"]
    table = server.cli("kernel", "show", "q8-rows", "--arch", "gfx906").stdout
    assert "R2/V0" in table and "static assertion failed" in table

    # a folder is pre-screened locally (no server involved, nothing stored)
    local = server.cli("kernel", "analyze", str(PACKAGE_DIR), "--arch", "gfx950", "--variant", "R1/V0")
    assert local.returncode == 0, local.stderr
    assert "q8-rows@" in local.stdout and "1 analysed, 0 failed" in local.stdout
    _bad_input_is_one_line_and_exit_2(server, tmp_path)


def _bad_input_is_one_line_and_exit_2(server: LiveServer, tmp_path: Path) -> None:
    """(On the same server: a second `tunebase serve` would double this module's cost.)"""
    broken = tmp_path / "broken"
    shutil.copytree(PACKAGE_DIR, broken)
    manifest = broken / "tunebase-kernel.toml"
    manifest.write_text(manifest.read_text().replace('"ROWS <= 4 or VGPR_CAP == 0"', '"ROWZ <= 4"'))
    cases = [
        (("kernel", "push", str(broken)), "restrictions.rules.0: unknown name(s) ROWZ"),
        (("kernel", "push", str(tmp_path / "nowhere")), "no tunebase-kernel.toml"),
        (("kernel", "show", "no-such-kernel"), "HTTP 404: no kernel package no-such-kernel"),
        (("kernel", "analyze", "tb-decode", "--arch", "host"), "HTTP 422: arch:"),
        (("kernel", "analyze", str(PACKAGE_DIR), "--arch", "gfx950", "--variant", "R9/V0"), "variants.0:"),
    ]
    for args, words in cases:
        result = server.cli(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (args, result.stderr)
    assert len(json.loads(server.cli("kernel", "list", "--json").stdout)["items"]) == 4  # nothing new stored
