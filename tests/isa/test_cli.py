"""`tunebase isa` as a real subprocess: JSON shape of DESIGN §7, exit code 2 for non-code-objects."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

CLI = [sys.executable, "-m", "service.cli"]
KEYS = {
    "name",
    "arch",
    "vgpr",
    "agpr",
    "sgpr",
    "lds_bytes",
    "scratch_bytes",
    "vgpr_spills",
    "sgpr_spills",
    "waves_per_simd",
    "limiter",
    "census",
    "diagnosis",
}


def test_isa_json(code_object: Callable[[str, str], Path]) -> None:
    path = code_object("dot4_loop", "gfx950")
    proc = subprocess.run([*CLI, "isa", "--json", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    reports = json.loads(proc.stdout)
    assert {r["name"] for r in reports} == {"tb_dot4_loop", "tb_lds_heavy"}
    for report in reports:
        assert set(report) >= KEYS
        assert report["arch"] == "gfx950"


def test_isa_table_and_bad_file(code_object: Callable[[str, str], Path], tmp_path: Path) -> None:
    proc = subprocess.run(
        [*CLI, "isa", str(code_object("spill", "gfx906"))], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "tb_spill" in proc.stdout and "spills > 0" in proc.stdout
    bad = tmp_path / "notes.txt"
    bad.write_text("not a code object\n")
    proc = subprocess.run([*CLI, "isa", str(bad)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "neither an AMDGPU ELF code object nor a clang offload bundle" in proc.stderr


def test_isa_demangles_and_fits_100_columns(code_object: Callable[[str, str], Path]) -> None:
    path = code_object("templated", "gfx906")
    env = {**os.environ, "COLUMNS": "250"}  # even a wide terminal gets at most 100 columns
    proc = subprocess.run([*CLI, "isa", str(path)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, proc.stdout
    row = next(line for line in lines if "gfx906" in line)
    assert row.split()[0] == "tb::rowsplit_gemv<4>" and "_Z" not in proc.stdout
    assert "void tb::rowsplit_gemv<4>(float const*, float const*, float*, int)" in proc.stdout
    loop = next(line for line in lines if "hottest loop" in line)
    assert re.search(r"depth \d+, \d+ instructions: \d+ global_load", loop) and "{" not in loop
    raw = json.loads(
        subprocess.run([*CLI, "isa", "--json", str(path)], capture_output=True, text=True, timeout=120).stdout
    )
    assert raw[0]["name"].startswith("_Z") and raw[0]["demangled"].startswith("void tb::rowsplit_gemv<4>")


def test_isa_notes_wrap_inside_100_columns(code_object: Callable[[str, str], Path]) -> None:
    proc = subprocess.run(
        [*CLI, "isa", str(code_object("spill", "gfx906"))], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and max(len(line) for line in proc.stdout.splitlines()) <= 100
    assert "scratch" in proc.stdout and "spills > 0" in proc.stdout
