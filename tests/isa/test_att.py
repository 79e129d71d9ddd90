"""`tunebase isa --att stats_*.csv`: thread-trace stats joined to the disassembly, per loop and per wait.

No AMD GPU runs here, so the stats file is written by the test in the exact form rocprofv3's ATT tool
writes it (rocprofiler-sdk source/lib/att-tool/code.cpp: header, quoted Instruction/Source, a
"; <symbol>" marker row before the kernel) for the real addresses and instructions of a real code
object; the cycle numbers are the test's own, chosen so every sum below is known.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from workers.isa.att import AttFormatError, att_summary, read_stats_csv
from workers.isa.bundle import code_objects
from workers.isa.disasm import Function
from workers.isa.isolate import disassemble_isolated

CLI = [sys.executable, "-m", "service.cli"]
WAVES = 4
TRIPS = 8


def census_kernel(asm_object: Callable[[str, str], Path]) -> tuple[Path, Function]:
    path = asm_object("live_range", "gfx942")
    data = code_objects(path.read_bytes())[0].data
    return path, disassemble_isolated(data, "gfx942").functions["tb_census"]


def stats_csv(function: Function, codeobj: int = 3) -> str:
    """Each instruction 10 cycles per hit; the combined vmcnt(0) lgkmcnt(0) wait 500 per hit (400 stall)."""
    loop_start = next(i.address for i in function.instructions if i.mnemonic == "global_load_dwordx4")
    loop_end = next(i.address for i in function.instructions if i.mnemonic == "s_cbranch_scc1")
    lines = ["CodeObj,Vaddr,Instruction,Hitcount,Latency,Stall,Idle,Source"]
    lines.append(f'{codeobj},{function.address},"; tb_census",0,0,0,0,"tb_census"')
    for ins in function.instructions:
        hits = WAVES * TRIPS if loop_start <= ins.address <= loop_end else WAVES
        per_hit, stall = (500, 400) if ins.text == "s_waitcnt vmcnt(0) lgkmcnt(0)" else (10, 0)
        lines.append(
            f'{codeobj},{ins.address},"{ins.text}",{hits},{hits * per_hit},{hits * stall},{hits},"k.s:1"'
        )
    # another code object traced in the same dispatch, overlapping addresses, other instructions
    lines.append(f'{codeobj + 1},{function.address},"v_nop",1,7,0,0,""')
    return "\n".join(lines) + "\n"


def test_summary_joins_loop_and_waits(asm_object: Callable[[str, str], Path]) -> None:
    _, function = census_kernel(asm_object)
    stats = read_stats_csv(stats_csv(function))
    assert stats.kernels == {(3, function.address): "tb_census"}
    summary = att_summary(stats, function)
    assert summary is not None and summary["codeobj"] == 3 and summary["mismatched"] == 0
    assert summary["waves"] == WAVES
    body = [i for i in function.instructions if summary["hot_loop"]["start"] <= f"0x{i.address:x}"]
    loop = summary["hot_loop"]
    inside = 18  # the loop of tb_census (tests/fixtures/isa/live_range.s)
    outside = len(function.instructions) - inside
    assert loop["instructions"] == inside and loop["trips"] == WAVES * TRIPS
    hits = WAVES * TRIPS
    assert loop["latency"] == (inside - 1) * hits * 10 + hits * 500
    assert summary["kernel"]["latency"] == loop["latency"] + outside * WAVES * 10
    assert loop["waitcnt_latency"] == 3 * hits * 10 + hits * 500
    worst = loop["waits"][0]
    assert (worst["vmcnt"], worst["lgkmcnt"], worst["stall"]) == (0, 0, hits * 400)
    assert summary["top"][0]["instruction"] == "s_waitcnt vmcnt(0) lgkmcnt(0)"
    assert summary["by_category"]["sync"]["latency_share"] > 0.5
    assert body  # the loop addresses are the disassembly's


def test_cli_att_option(asm_object: Callable[[str, str], Path], tmp_path: Path) -> None:
    path, function = census_kernel(asm_object)
    csv_path = tmp_path / "stats_ui_output_agent_1_dispatch_2.csv"
    csv_path.write_text(stats_csv(function))
    proc = subprocess.run(
        [*CLI, "isa", "--json", "--att", str(csv_path), str(path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    reports = {r["name"]: r for r in json.loads(proc.stdout)}
    assert reports["tb_census"]["att"]["hot_loop"]["trips"] == WAVES * TRIPS
    assert reports["tb_live_vgpr"]["att"] is None  # no traced row inside that kernel
    table = subprocess.run(
        [*CLI, "isa", "--att", str(csv_path), str(path)], capture_output=True, text=True, timeout=180
    )
    assert table.returncode == 0 and "ATT hot loop" in table.stdout and "worst" in table.stdout

    bad = tmp_path / "bad.csv"
    bad.write_text("kernel,calls\nx,1\n")
    refused = subprocess.run(
        [*CLI, "isa", "--att", str(bad), str(path)], capture_output=True, text=True, timeout=180
    )
    assert refused.returncode == 2 and "line 1: header" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("CodeObj,Vaddr,Instruction,Hitcount,Latency,Stall,Idle,Source\n1,2,x,3\n", "line 2: 4 fields"),
        ("CodeObj,Vaddr,Instruction,Hitcount,Latency,Stall,Idle,Source\n1,2,x,a,0,0,0,s\n", "line 2:"),
    ],
)
def test_malformed_stats(text: str, message: str) -> None:
    with pytest.raises(AttFormatError, match=message):
        read_stats_csv(text)
