"""rocprofv3 thread-trace (ATT) summaries: the decoded ``stats_*.csv`` joined to our disassembly.

What is importable and why (see docs/rocm.md, "Thread trace"):

- ``stats_ui_output_agent_<a>_dispatch_<d>.csv`` is documented (rocprofiler-sdk "Using thread trace":
  columns Codeobj, Vaddr, Instruction, Hitcount, Latency, Stall, Idle, Source and their meaning) and
  written by open source (rocprofiler-sdk ``source/lib/att-tool/code.cpp``): header
  ``CodeObj,Vaddr,...``, Instruction and Source double-quoted, and before a kernel's first instruction a
  marker row ``id,addr,"; <symbol>",0,0,0,0,"<demangled>"``. Vaddr is the ELF virtual address, the
  same address space as our disassembly, so every row joins to an instruction and its loop.
- The raw ``.att`` files are SQTT packets with no published format; only AMD's binary ROCprof Trace
  Decoder reads them. Not imported.
- ``ui_output_*/`` JSON is the viewer's input; its ``code.json`` repeats the CSV's per-instruction
  numbers, so the CSV is the one read.

Cycle figures are sums over the traced waves of one CU per shader engine (``att-target-cu``).
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from workers.isa.census import Loop, hottest_loop
from workers.isa.disasm import Function
from workers.isa.loop_census import category, waitcnt_counters

HEADER = ("codeobj", "vaddr", "instruction", "hitcount", "latency", "stall", "idle", "source")
TOP = 10


class AttFormatError(ValueError):
    """The file is not a rocprofv3 thread-trace stats CSV; says which line and why."""


@dataclass(frozen=True)
class AttRow:
    codeobj: int
    vaddr: int
    instruction: str
    hitcount: int
    latency: int
    stall: int
    idle: int
    source: str

    @property
    def mnemonic(self) -> str:
        return self.instruction.split(None, 1)[0] if self.instruction else ""


@dataclass(frozen=True)
class AttStats:
    rows: list[AttRow]
    kernels: dict[tuple[int, int], str]  # (code object id, vaddr) → symbol, from the marker rows


def read_stats_csv(text: str) -> AttStats:
    """Rows of one ``stats_*.csv``; AttFormatError naming the line for anything else."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise AttFormatError("empty file: expected the header " + ",".join(HEADER)) from None
    if tuple(h.strip().lower() for h in header) != HEADER:
        raise AttFormatError(f"line 1: header {','.join(header)!r} is not CodeObj,Vaddr,Instruction,...")
    rows: list[AttRow] = []
    kernels: dict[tuple[int, int], str] = {}
    for number, fields in enumerate(reader, start=2):
        if not fields:
            continue
        if len(fields) != len(HEADER):
            raise AttFormatError(f"line {number}: {len(fields)} fields, expected {len(HEADER)}")
        try:
            codeobj, vaddr = int(fields[0]), int(fields[1])
            hitcount, latency, stall, idle = (int(value) for value in fields[3:7])
        except ValueError as exc:
            raise AttFormatError(f"line {number}: {exc}") from None
        instruction = fields[2].strip()
        if instruction.startswith(";"):  # "; <symbol>" marks where a kernel starts
            kernels[(codeobj, vaddr)] = instruction.lstrip("; ").strip()
            continue
        rows.append(AttRow(codeobj, vaddr, instruction, hitcount, latency, stall, idle, fields[7]))
    return AttStats(rows, kernels)


def _sums(rows: list[AttRow]) -> dict[str, int]:
    return {
        "instructions": len(rows),
        "latency": sum(r.latency for r in rows),
        "stall": sum(r.stall for r in rows),
        "idle": sum(r.idle for r in rows),
    }


def _share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def _row_item(row: AttRow) -> dict[str, Any]:
    return {
        "at": f"0x{row.vaddr:x}",
        "instruction": row.instruction,
        "hitcount": row.hitcount,
        "latency": row.latency,
        "stall": row.stall,
        "idle": row.idle,
    }


def att_summary(stats: AttStats, function: Function, loop: Loop | None = None) -> dict[str, Any] | None:
    """Where one kernel's traced cycles went; None when no row of the trace is inside this kernel.

    The code object id whose rows land on this kernel's addresses with the same mnemonics wins; the
    share of rows whose mnemonic differs is reported (``mismatched``): a trace of another build.
    """
    ours = {ins.address: ins for ins in function.instructions}
    end = function.address + function.size
    by_object: dict[int, list[AttRow]] = defaultdict(list)
    for row in stats.rows:
        if function.address <= row.vaddr < end:
            by_object[row.codeobj].append(row)
    if not by_object:
        return None

    def agreement(rows: list[AttRow]) -> int:
        return sum(1 for r in rows if r.vaddr in ours and r.mnemonic == ours[r.vaddr].mnemonic)

    codeobj, rows = max(by_object.items(), key=lambda item: (agreement(item[1]), len(item[1])))
    mismatched = len(rows) - agreement(rows)
    total = _sums(rows)
    entry = min(rows, key=lambda r: r.vaddr)
    summary: dict[str, Any] = {
        "codeobj": codeobj,
        "waves": entry.hitcount if entry.vaddr == function.address else None,
        "mismatched": mismatched,
        "kernel": total,
        "by_category": {},
        "hot_loop": None,
        "top": [_row_item(r) for r in sorted(rows, key=lambda r: -r.latency)[:TOP]],
    }
    categories: dict[str, list[AttRow]] = defaultdict(list)
    for row in rows:
        categories[category(row.mnemonic)].append(row)
    summary["by_category"] = {
        name: {**_sums(group), "latency_share": _share(sum(r.latency for r in group), total["latency"])}
        for name, group in sorted(categories.items(), key=lambda item: -sum(r.latency for r in item[1]))
    }
    loop = loop or hottest_loop(function)
    if loop is not None:
        inside = [r for r in rows if loop.start <= r.vaddr <= loop.end]
        loop_sums = _sums(inside)
        waits = []
        for row in inside:
            ins = ours.get(row.vaddr)
            counters = waitcnt_counters(ins) if ins is not None else None
            if counters is not None:
                waits.append({**_row_item(row), **counters})
        wait_latency = sum(w["latency"] for w in waits)
        head = next((r for r in inside if r.vaddr == loop.start), None)
        summary["hot_loop"] = {
            "start": f"0x{loop.start:x}",
            "end": f"0x{loop.end:x}",
            **loop_sums,
            "latency_share": _share(loop_sums["latency"], total["latency"]),
            "trips": head.hitcount if head is not None else None,
            "waitcnt_latency": wait_latency,
            "waitcnt_share": _share(wait_latency, loop_sums["latency"]),
            "waits": sorted(waits, key=lambda w: -w["latency"])[:TOP],
        }
    return summary


def att_lines(att: dict[str, Any] | None) -> list[str]:
    """Sentences for `tunebase isa --att`: where the traced cycles of the kernel went."""
    if not att:
        return []
    kernel = att["kernel"]
    lines = [
        f"ATT (code object {att['codeobj']}): {kernel['latency']} cycles latency, {kernel['stall']} stall, "
        f"{kernel['idle']} idle over {kernel['instructions']} instructions"
        + (f", {att['waves']} waves" if att.get("waves") else "")
        + (f"; {att['mismatched']} rows do not match this disassembly" if att.get("mismatched") else "")
    ]
    loop = att.get("hot_loop")
    if loop:
        worst = loop["waits"][0] if loop["waits"] else None
        text = (
            f"ATT hot loop {loop['start']}-{loop['end']}: {100 * loop['latency_share']:.0f}% of latency; "
            f"s_waitcnt {100 * loop['waitcnt_share']:.0f}% of the loop's"
        )
        if worst:
            counters = " ".join(f"{k}({v})" for k, v in worst.items() if k.endswith("cnt"))
            text += f" (worst {worst['at']} {counters}: {worst['latency']} cycles)"
        lines.append(text)
    shares = [f"{name} {100 * v['latency_share']:.0f}%" for name, v in att["by_category"].items()]
    lines.append("ATT latency by kind: " + ", ".join(shares[:6]))
    return lines
