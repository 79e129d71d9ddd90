"""`tunebase isa` over the built-in decode space (issue 13): static LDS sized per variant makes the
occupancy really vary on gfx906, and the default space compiles without spills."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.packages.build import compile_units
from kernels.packages.loader import builtin_packages
from workers.compilers import compiler_for_arch
from workers.compilers.cache import CompileCache

DECODE = builtin_packages()["tb-decode"]


def _isa(artifact_dir: Path, arch: str, fmt: str) -> list[dict[str, object]]:
    compiler = compiler_for_arch(arch)
    if not compiler.identity():
        pytest.skip(f"{compiler.name} is not installed here")
    (unit,) = compile_units(DECODE, fmt, "rocm", DECODE.space("rocm"))
    got = CompileCache(artifact_dir / "isa-decode").get_or_compile(
        compiler, unit.source, DECODE.name, fmt, arch, unit.defines
    )
    assert got.result.ok and got.result.path is not None, got.result.log[-3000:]
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", "isa", "--json", str(got.result.path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    reports = json.loads(proc.stdout)
    assert {r["name"] for r in reports} == set(unit.symbols(DECODE).values())
    return list(reports)


@pytest.mark.parametrize(
    "fmt", ["Q4_0", pytest.param("Q4_K", marks=pytest.mark.slow)]
)  # Q4_K: 45 s, test-full
def test_gfx906_occupancy_varies_across_the_space_without_spills(artifact_dir: Path, fmt: str) -> None:
    reports = _isa(artifact_dir, "gfx906", fmt)
    waves = {int(r["waves_per_simd"]) for r in reports}  # type: ignore[call-overload]
    assert len(waves) >= 3, waves
    assert all(r["vgpr_spills"] == 0 and r["sgpr_spills"] == 0 and r["scratch_bytes"] == 0 for r in reports)
    by_name = {str(r["name"]): r for r in reports}
    # the static LDS is what the variant asks for: 40 KiB (MX4, KB <= 2) allows one workgroup per CU
    assert by_name["tb_decode_mx4_kb1_rw1_u4_rg1_pg0_pp0"]["lds_bytes"] == 40960
    assert by_name["tb_decode_mx4_kb1_rw1_u4_rg1_pg0_pp0"]["waves_per_simd"] == 1
    assert int(by_name["tb_decode_mx1_kb1_rw1_u4_rg1_pg0_pp0"]["lds_bytes"]) == 10240  # type: ignore[call-overload]
