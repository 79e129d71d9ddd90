"""Census and diagnosis on known kernels, through both disassemblers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from workers.isa.analyze import analyze_file
from workers.isa.bundle import code_objects
from workers.isa.census import branch_target
from workers.isa.disasm import Instruction, disassemble
from workers.isa.metadata import read_metadata

ARCHS = ("gfx906", "gfx90a", "gfx942", "gfx950")


def by_name(reports: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in reports}


@pytest.mark.parametrize("arch", ARCHS)
def test_dot4_in_hottest_loop(code_object: Callable[[str, str], Path], arch: str) -> None:
    report = by_name(analyze_file(code_object("dot4_loop", arch)))["tb_dot4_loop"]
    loop = report["census"]["hottest_loop"]
    assert loop is not None
    assert loop["counts"]["v_dot4"] >= 1  # v_dot4_i32_i8 (v_dot4c_i32_i8 on gfx90a+) inside the loop
    assert loop["counts"]["global_load"] >= 1
    assert loop["counts"]["s_cbranch"] >= 1
    assert report["census"]["kernel"]["v_dot4"] >= loop["counts"]["v_dot4"]
    assert report["census"]["kernel"]["scratch"] == 0
    assert report["vgpr_spills"] == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_spill_kernel_census_and_diagnosis(code_object: Callable[[str, str], Path], arch: str) -> None:
    report = by_name(analyze_file(code_object("spill", arch)))["tb_spill"]
    assert report["vgpr_spills"] > 0
    assert report["census"]["kernel"]["scratch"] > 0
    assert report["census"]["hottest_loop"]["counts"]["scratch"] > 0
    assert any(line.startswith("spills > 0") for line in report["diagnosis"])


@pytest.mark.parametrize("arch", ARCHS)
def test_lds_limit_diagnosed(code_object: Callable[[str, str], Path], arch: str) -> None:
    report = by_name(analyze_file(code_object("dot4_loop", arch)))["tb_lds_heavy"]
    assert report["lds_bytes"] == 40 * 1024
    assert report["limiter"] == "lds"
    # 40 KiB: 1 workgroup per 64 KiB CU, 4 on gfx950's 160 KiB; 4 waves per workgroup over 4 SIMDs
    assert report["waves_per_simd"] == (4 if arch == "gfx950" else 1)
    assert report["diagnosis"][0].startswith("LDS 40 KiB limits workgroups per CU")


@pytest.mark.parametrize("arch", ["gfx906", "gfx90a"])
def test_objdump_and_llvm22_agree(code_object: Callable[[str, str], Path], arch: str) -> None:
    obj = code_objects(code_object("dot4_loop", arch).read_bytes())[0]
    meta = read_metadata(obj.data)
    objdump = disassemble(obj.data, meta.arch, engine="objdump")
    llvm22 = disassemble(obj.data, meta.arch, engine="llvm22")
    assert [f.name for f in objdump] == [f.name for f in llvm22]
    for a, b in zip(objdump, llvm22, strict=True):
        assert [i.address for i in a.instructions] == [i.address for i in b.instructions]
        assert [i.mnemonic for i in a.instructions] == [i.mnemonic for i in b.instructions]


def test_branch_target_arithmetic() -> None:
    # s_cbranch_scc0 65523 at 0x198c: simm16 = 65523 - 65536 = -13; 0x198c + 4 - 52 = 0x195c
    assert branch_target(Instruction(0x198C, "s_cbranch_scc0", "65523")) == 0x195C
    assert branch_target(Instruction(0x1990, "s_branch", "1")) == 0x1998
    assert branch_target(Instruction(0x1990, "v_add_u32", "v0, v1, v2")) is None


def test_vgpr_diagnosis_line() -> None:
    from workers.isa.diagnosis import diagnose
    from workers.isa.occupancy import occupancy

    occ = occupancy("gfx906", 130, 0, 20, 0, 256)
    lines = diagnose("gfx906", 130, 0, 20, 0, 0, 0, 0, 256, occ)
    assert lines[0].startswith("VGPR 130 → 1 wave/SIMD: cap with __launch_bounds__(256, 2)")


def test_hot_loop_is_the_innermost_loop_doing_math() -> None:
    from workers.isa.census import Loop, hottest_loop
    from workers.isa.disasm import Function

    def kernel(first: str) -> Function:
        rows = [
            Instruction(0, first, "v[0:3], v[4:5], v[6:7], v[0:3]"),
            Instruction(4, "s_add_u32", "s0, s0, 1"),
            Instruction(8, "s_cbranch_scc0", "65534"),  # inner loop 4..8: no math
            Instruction(12, "s_cbranch_scc0", "65532"),  # outer loop 0..12 holds the MFMA
            Instruction(16, "s_endpgm", ""),
        ]
        return Function("k", 0, 20, rows)

    assert hottest_loop(kernel("v_mfma_f32_16x16x16_f16")) == Loop(0, 12, 1)
    assert hottest_loop(kernel("v_pk_add_f32")) == Loop(4, 8, 2)  # no math anywhere: the innermost
