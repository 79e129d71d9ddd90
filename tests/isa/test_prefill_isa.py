"""tb-prefill's AMD twins through the real compilers and the ISA analysis (no GPU): the int8 matrix
instructions each arch must use (MFMA on gfx90a / gfx942 / gfx950, sdot4 on gfx906), inside the main
loop, no spills in the sampled space, and the code object's LDS equal to the manifest's ``smem``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernels.formats.registry import get_format
from kernels.packages.build import compile_units
from kernels.packages.expressions import as_int
from kernels.packages.loader import builtin_packages
from kernels.packages.package import DeviceFacts
from workers.compilers import compiler_for_arch
from workers.compilers.cache import CompileCache
from workers.isa.analyze import analyze_file
from workers.isa.bundle import code_objects
from workers.isa.disasm import disassemble
from workers.isa.metadata import read_metadata

PACKAGE = builtin_packages()["tb-prefill"]
VARIANTS = (
    "N64/M32/W2x2/K4/S2/SK1/MB1/E0",
    "N128/M64/W4x2/K4/S2/SK2/MB1/E0",
    "N64/M64/W2x2/K8/S2/SK1/MB1/E0",
)
MATRIX_OP = {
    "gfx906": "v_dot4_i32_i8",
    "gfx90a": "v_mfma_i32_16x16x16i8",
    "gfx942": "v_mfma_i32_16x16x32_i8",
    "gfx950": "v_mfma_i32_16x16x32_i8",
}


def _build(tmp: Path, arch: str, fmt: str) -> Path:
    compiler = compiler_for_arch(arch)
    if not compiler.identity():
        pytest.skip(f"{compiler.name} is not installed here")
    variants = [PACKAGE.parse(name, "rocm") for name in VARIANTS]
    (unit,) = compile_units(PACKAGE, fmt, "rocm", variants)
    got = CompileCache(tmp).get_or_compile(compiler, unit.source, PACKAGE.name, fmt, arch, unit.defines)
    assert got.result.ok and got.result.path is not None, got.result.log[-3000:]
    return got.result.path


def _reports(path: Path) -> dict[str, dict[str, Any]]:
    return {str(r["name"]).removesuffix(".kd"): r for r in analyze_file(path)}


@pytest.mark.parametrize("arch", sorted(MATRIX_OP))
@pytest.mark.parametrize("fmt", ["Q4_0", "Q4_K"])
def test_amd_twin_uses_the_arch_int8_matrix_instruction(tmp_path: Path, arch: str, fmt: str) -> None:
    path = _build(tmp_path, arch, fmt)
    reports = _reports(path)
    obj = code_objects(path.read_bytes())[0]
    functions = {f.name: f for f in disassemble(obj.data, read_metadata(obj.data).arch)}
    device = DeviceFacts("rocm", arch, 64, 64)
    for name in VARIANTS:
        variant = PACKAGE.parse(name, "rocm")
        symbol = PACKAGE.symbol(variant)
        report = reports[symbol]
        values = PACKAGE.bindings(variant, 4096, 5120, 512, get_format(fmt), device)
        if PACKAGE.point_problems(values):  # e.g. more LDS than the arch has: never run there
            continue
        mnemonics = [i.mnemonic for i in functions[symbol].instructions]
        assert MATRIX_OP[arch] in mnemonics, (arch, name, sorted(set(mnemonics))[:40])
        if arch == "gfx906":
            assert not any(m.startswith("v_mfma") for m in mnemonics)
        assert report["vgpr_spills"] == 0 and report["census"]["kernel"]["scratch"] == 0, (name, report)
        assert report["lds_bytes"] == as_int(values["smem"]), name  # static LDS = the manifest's formula
        assert report["waves_per_simd"] >= 1


def test_prelaunch_kernel_is_in_every_code_object(tmp_path: Path) -> None:
    reports = _reports(_build(tmp_path, "gfx942", "Q8_0"))
    for sk in (1, 2, 4):
        report = reports[f"tb_prefill_prep_sk{sk}"]
        assert report["lds_bytes"] == 0 and report["vgpr_spills"] == 0
