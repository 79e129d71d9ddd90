"""Liveness, per-purpose breakdown and hot-loop census: exact on hand-written kernels, bounded on real ones.

The hand-written kernels (tests/fixtures/isa/live_range.s) have live ranges worked out by hand in the
file's header; the compiled ones (hipcc, clang 22, Triton 3.9) are checked against what the compiler's
own metadata note says: no analysis may find more live registers than the kernel was given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.isa.conftest import ASM_ARCHS, TRITON
from workers.isa.analyze import analyze_file
from workers.isa.bundle import code_objects
from workers.isa.disasm import Instruction
from workers.isa.isolate import disassemble_isolated
from workers.isa.loop_census import waitcnt_counters
from workers.isa.metadata import read_metadata
from workers.isa.operands import (
    ACC,
    ADDR,
    FRAG,
    OUT,
    SCALE,
    STAGE,
    access,
    register_mask,
)

Builder = Callable[[str, str], Path]


def reports(path: Path) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in analyze_file(path)}


def body(path: Path, kernel: str) -> list[Instruction]:
    data = code_objects(path.read_bytes())[0].data
    return disassemble_isolated(data, read_metadata(data).arch).functions[kernel].instructions


def v(*registers: int) -> int:
    return sum(1 << r for r in registers)


@pytest.mark.parametrize("arch", ASM_ARCHS)
def test_known_live_range_in_vgprs(asm_object: Builder, arch: str) -> None:
    path = asm_object("live_range", arch)
    report = reports(path)["tb_live_vgpr"]
    rows = body(path, "tb_live_vgpr")
    loads = [i for i in rows if i.mnemonic == "global_load_dwordx2"]
    wait = next(i for i in rows if i.mnemonic == "s_waitcnt" and "vmcnt(0)" in i.operands)
    branch = next(i for i in rows if i.mnemonic == "s_cbranch_vccnz")
    live = report["liveness"]
    peak = live["vgpr"]
    assert peak["high_water"] == 11
    assert peak["region"] == {
        "start": f"0x{loads[1].address:x}",
        "end": f"0x{wait.address:x}",
        "instructions": 4,
    }
    assert peak["peaks"] == 1 and peak["loop"] == f"0x{loads[0].address:x}-0x{branch.address:x}"
    assert peak["breakdown"] == {"accumulators": 4, "fragments": 4, "addresses": 2, "loop_control": 1}
    assert live["agpr"]["high_water"] == 0
    head = live["hot_loop"]["live_at_head"]  # v0, v1, v[2:5], v10 cross the back edge
    assert head["vgpr"] == 7 and head["breakdown"] == {"accumulators": 4, "addresses": 2, "loop_control": 1}
    assert live["within_note"] and live["arch_vgpr_limit"] == 12


@pytest.mark.parametrize("arch", ASM_ARCHS)
def test_known_live_range_with_agpr_accumulators(asm_object: Builder, arch: str) -> None:
    report = reports(asm_object("live_range", arch))["tb_live_agpr"]
    live = report["liveness"]
    assert live["vgpr"]["high_water"] == 7
    assert live["vgpr"]["breakdown"] == {"fragments": 4, "addresses": 2, "loop_control": 1}
    assert live["agpr"]["high_water"] == 4 and live["agpr"]["breakdown"] == {"accumulators": 4}
    # the note counts 12 arch VGPRs + 4 AGPRs as .vgpr_count 16: occupancy and the bound use 12
    assert report["vgpr"] == 16 and report["arch_vgpr"] == 12 and live["within_note"]


@pytest.mark.parametrize("arch", ASM_ARCHS)
def test_hot_loop_census_of_a_known_loop(asm_object: Builder, arch: str) -> None:
    loop = reports(asm_object("live_range", arch))["tb_census"]["hot_loop"]
    assert loop["instructions"] == 18
    waits = loop["waitcnt"]
    assert (waits["count"], waits["drain_vmcnt"], waits["drain_lgkmcnt"]) == (4, 2, 2)
    assert (waits["combined"], waits["full_drain"]) == (1, 1)
    assert [{k: w[k] for k in w if k != "at"} for w in waits["waits"]] == [
        {"vmcnt": 0},
        {"lgkmcnt": 0},
        {"lgkmcnt": 1},
        {"vmcnt": 0, "lgkmcnt": 0},
    ]
    assert loop["mfma"]["per_iteration"] == 2 and loop["mfma"]["density"] == round(2 / 18, 4)
    assert loop["mix"] == {
        "mfma": 2, "vmem_load": 1, "vmem_store": 0, "lds_read": 3, "lds_write": 2, "lds_other": 0, "smem": 0,
        "valu": 1, "salu": 2, "branch": 1, "sync": 5, "nop": 1, "other": 0,
    }  # fmt: skip
    assert loop["padding"] == {"s_nop": 1, "s_nop_wait_states": 5, "v_nop": 0}
    assert loop["ds_read"] == {
        "count": 3, "with_offset": 1, "zero_offset": 2, "base_vgprs": 2, "distinct_offsets": 2,
    }  # fmt: skip
    assert loop["ds_write"]["with_offset"] == 1 and loop["ds_write"]["base_vgprs"] == 1
    assert loop["address_valu"] == 1  # v_add_u32 v14, 0x800, v1 only feeds a ds_read address
    assert loop["loads_by_purpose"] == {"ds_read": {"fragments": 3}, "global_load": {"staging": 1}}


def _real_objects(code_object: Builder) -> list[Path]:
    compiled = [code_object(stem, arch) for stem in ("dot4_loop", "spill", "templated")
                for arch in ("gfx906", "gfx90a", "gfx942", "gfx950")]  # fmt: skip
    return compiled + sorted(TRITON.glob("*.hsaco"))


def test_high_water_within_the_note_on_real_objects(code_object: Builder) -> None:
    seen = 0
    for path in _real_objects(code_object):
        for report in analyze_file(path):
            live = report["liveness"]
            assert live is not None, (path, report["name"], report["disassembly_error"])
            assert 0 < live["vgpr"]["high_water"] <= report["arch_vgpr"], (path, report["name"])
            assert live["agpr"]["high_water"] <= report["agpr"]
            assert live["sgpr"]["high_water"] <= report["sgpr"]
            assert live["within_note"] is True
            assert sum(live["vgpr"]["breakdown"].values()) == live["vgpr"]["high_water"]
            seen += 1
    assert seen >= 19


def test_triton_mxfp4_gemm_hot_loop() -> None:
    """Triton's tl.dot_scaled GEMM on gfx950: scaled MFMAs, E8M0 scale reads, registers near the note."""
    (report,) = analyze_file(TRITON / "mxfp4_gemm_gfx950.hsaco")
    loop = report["hot_loop"]
    assert loop["mfma"]["kinds"] == {"v_mfma_scale_f32_32x32x64_f8f6f4": 16}
    reads = loop["loads_by_purpose"]["ds_read"]
    assert reads["fragments"] == 16 and reads["scales"] == 16  # ds_read_b128 A/B, ds_read_u8 E8M0 bytes
    peak = report["liveness"]["vgpr"]
    assert peak["loop"] == f"{loop['start']}-{loop['end']}"
    assert peak["breakdown"]["accumulators"] == 64 and peak["breakdown"]["scales"] > 0
    assert report["arch_vgpr"] - 16 <= peak["high_water"] <= report["arch_vgpr"]


def test_register_ranges_and_roles() -> None:
    assert register_mask("v[4:7], a0, s[0:1]") == v(4, 5, 6, 7) | 1 << 256 | 1 << 512 | 1 << 513
    assert register_mask("off offset:16 sc0 nt") == 0
    scaled = access(
        "v_mfma_scale_f32_16x16x128_f8f6f4", "v[0:3], v[4:11], v[12:19], v[0:3], v20, v21 op_sel_hi:[0,0,0]"
    )
    assert scaled.defs == v(0, 1, 2, 3) and scaled.roles[ACC] == v(0, 1, 2, 3)
    assert scaled.roles[FRAG] == sum(1 << r for r in range(4, 20)) and scaled.roles[SCALE] == v(20, 21)
    store = access("global_store_dwordx4", "v6, v[2:5], s[0:1] offset:16")
    assert store.defs == 0 and store.roles[OUT] == v(2, 3, 4, 5) and store.roles[ADDR] & v(6) == v(6)
    lds = access("ds_write_b128", "v16, v[18:21] offset:16")
    assert lds.roles[STAGE] == v(18, 19, 20, 21) and lds.roles[ADDR] == v(16)
    carry = access("v_add_co_u32_e32", "v2, vcc, s4, v3")
    assert carry.defs == v(2) | 1 << 640 | 1 << 641 and carry.flow & v(3)
    half = access("global_load_short_d16_hi", "v5, v[0:1], off")
    assert half.defs == v(5) and half.flow == v(5)  # the low half survives: the old value is read
    assert access("s_cbranch_vccnz", "65529").roles != access("s_branch", "65529").roles


def test_waitcnt_forms() -> None:
    def parse(mnemonic: str, operands: str) -> dict[str, int] | None:
        return waitcnt_counters(Instruction(0, mnemonic, operands))

    assert parse("s_waitcnt", "vmcnt(2) lgkmcnt(0)") == {"vmcnt": 2, "lgkmcnt": 0}
    assert parse("s_waitcnt", "0") == {"vmcnt": 0, "expcnt": 0, "lgkmcnt": 0}
    assert parse("s_waitcnt", "0xc07f") == {"lgkmcnt": 0}  # gfx9: vmcnt 63 and expcnt 7 mean "no wait"
    assert parse("s_waitcnt_vscnt", "null, 0x0") == {"vscnt": 0}
    assert parse("s_wait_loadcnt", "0x3") == {"loadcnt": 3}
    assert parse("v_add_u32", "v0, v1, v2") is None


def test_gfx950_special_forms() -> None:
    swap = access("v_permlane32_swap_b32_e32", "v1, v2")
    assert swap.defs == v(1, 2) and swap.flow == v(1, 2)
    scale = access("v_mfma_ld_scale_b32", "v3, v4")
    assert scale.defs == 0 and scale.roles[SCALE] == v(3, 4)
    tr = access("ds_read_b64_tr_b4", "v[0:1], v5 offset:128")
    assert tr.defs == v(0, 1) and tr.roles[ADDR] == v(5)
    direct = access("global_load_lds_dwordx4", "v[2:3], off")
    assert direct.defs == 0 and direct.roles[ADDR] == v(2, 3)


def test_scaled_mfma_loop_compiled_by_clang(code_object: Builder) -> None:
    """clang 22's gfx950 code for tests/fixtures/isa/mfma_scale.hip: what each register and load is for."""
    (report,) = analyze_file(code_object("mfma_scale", "gfx950"))
    loop = report["hot_loop"]
    assert loop["mfma"]["kinds"] == {"v_mfma_scale_f32_16x16x128_f8f6f4": 1}
    loads = loop["loads_by_purpose"]
    assert loads["global_load"]["scales"] == 2  # sa[...] and sb[...]: one scale word per operand
    assert loads["global_load"]["staging"] >= 2 and loads["ds_read"] == {"fragments": 2}
    assert loop["ds_write"]["count"] >= 2 and loop["waitcnt"]["drain_vmcnt"] >= 1
    live = report["liveness"]
    assert live["within_note"] and live["hot_loop"]["live_at_head"]["breakdown"]["accumulators"] == 4
    assert set(live["vgpr"]["breakdown"]) <= {"accumulators", "staging", "addresses", "scales", "fragments"}


def test_float_fma_accumulators() -> None:
    fmac = access("v_fmac_f32_e32", "v1, v2, v3")
    assert fmac.roles[ACC] == v(1) and fmac.roles[FRAG] == v(2, 3) and fmac.defs == v(1)
    fma = access("v_fma_f32", "v4, v5, v6, v4")
    assert fma.roles[ACC] == v(4) and fma.roles[FRAG] == v(5, 6)
    other = access("v_fma_f32", "v4, v5, v6, v7")  # not in place: the result's roles flow back
    assert other.roles[ACC] == 0 and other.flow == v(5, 6, 7)
    address = access("v_mad_u32_u24", "v1, v2, v3, v1")  # integer: address arithmetic, no role
    assert address.roles[ACC] == 0 and address.flow == v(2, 3, 1)
