"""`tunebase isa` as a real subprocess: JSON shape of DESIGN §7, exit code 2 for non-code-objects."""

from __future__ import annotations

import json
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
