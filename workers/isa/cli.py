"""`tunebase isa FILE [--json]`: resources, occupancy, census, liveness and diagnosis of a code object."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Literal

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from workers.isa.analyze import analyze_file
from workers.isa.att import AttFormatError, AttStats, att_lines, read_stats_csv
from workers.isa.bundle import NotACodeObject
from workers.isa.demangle import demangle
from workers.isa.summary import hot_loop_lines, liveness_lines

WIDTH = 100  # the table and the notes fit a 100-column terminal or CI log
COLUMNS = ("kernel", "arch", "VGPR", "AGPR", "SGPR", "LDS B", "scratch", "spills v/s", "waves", "limiter")
# census categories in the order an engineer reads a loop: math, memory, sync, control
LOOP_ORDER = (
    "v_dot4", "v_dot2", "v_mfma", "global_load", "buffer_load", "ds_read", "ds_write", "global_store",
    "buffer_store", "scratch", "s_waitcnt", "s_barrier", "s_nop", "s_cbranch", "s_swappc",
    "sgpr_spill_lanes", "accvgpr_moves",
)  # fmt: skip


def loop_summary(loop: dict[str, Any]) -> str:
    """'0x1a0-0x2f4, depth 2, 57 instructions: 8 v_dot4, 16 global_load, ...' (non-zero counts only)."""
    counts = loop.get("counts", {})
    parts = [f"{counts[name]} {name}" for name in LOOP_ORDER if counts.get(name)]
    depth, total = loop.get("depth", 1), counts.get("total", 0)
    head = f"{loop['start']}-{loop['end']}, depth {depth}, {total} instructions"
    return head + (": " + ", ".join(parts) if parts else "")


def short_name(name: str) -> str:
    """'void tb::gemv<4>(float const*, int)' -> 'tb::gemv<4>'; the notes below the table keep the rest."""
    if name.endswith(")"):
        depth = 0
        for index in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[index], 0)
            if depth == 0:
                name = name[:index]
                break
    head, _, rest = name.partition(" ")
    return rest if rest and "<" not in head and "(" not in head and "::" not in head else name


def _wrapped(console: Console, text: str, indent: str) -> None:
    width = max(console.width - len(indent) - 2, 20)
    lines = textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ")
    for line in lines or [indent]:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def render(reports: list[dict[str, Any]], console: Console) -> None:
    names = demangle([r["name"] for r in reports])
    table = Table(title="AMDGPU kernels", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for column in COLUMNS:
        if column == "kernel":
            width = max([len(short_name(n)) for n in names] + [6])
            table.add_column(column, overflow="fold", min_width=min(width, 28))
        else:
            justify: Literal["left", "right"] = "left" if column in ("arch", "limiter") else "right"
            table.add_column(column, no_wrap=column != "limiter", justify=justify, overflow="fold")
    for r, name in zip(reports, names, strict=True):
        table.add_row(
            short_name(name), r["arch"], str(r["vgpr"]), str(r["agpr"]), str(r["sgpr"]), str(r["lds_bytes"]),
            str(r["scratch_bytes"]), f"{r['vgpr_spills']}/{r['sgpr_spills']}", str(r["waves_per_simd"]),
            str(r["limiter"]),
        )  # fmt: skip
    console.print(table)
    for r, name in zip(reports, names, strict=True):
        loop = (r.get("census") or {}).get("hottest_loop")
        lines = ([f"hottest loop {loop_summary(loop)}"] if loop else []) + list(r["diagnosis"])
        lines += liveness_lines(r.get("liveness")) + hot_loop_lines(r.get("hot_loop"))
        lines += att_lines(r.get("att"))
        if r.get("disassembly_error"):
            lines.append(f"no disassembly: {r['disassembly_error']}")
        if lines:
            _wrapped(console, name, "")
        for line in lines:
            _wrapped(console, line, "  ")


def isa(
    file: Path = typer.Argument(..., help="AMDGPU code object (.co/.hsaco) or clang offload bundle"),
    as_json: bool = typer.Option(False, "--json", help="print the per-kernel reports as JSON"),
    att: Path | None = typer.Option(
        None, "--att", help="rocprofv3 --att stats_*.csv of a run of this code object: cycles per loop/wait"
    ),
) -> None:
    """Analyse an AMDGPU code object: resources, occupancy, census, register liveness, hot loop, diagnosis."""
    stats: AttStats | None = None
    if att is not None:
        try:
            stats = read_stats_csv(att.read_text(errors="replace"))
        except (OSError, AttFormatError) as exc:
            typer.echo(f"error: --att {att}: {exc}", err=True)  # one line, never wrapped
            raise typer.Exit(2) from None
    try:
        reports = analyze_file(file, att=stats)
    except NotACodeObject as exc:
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {file}: {exc}", highlight=False)
        raise typer.Exit(2) from None
    if as_json:
        for report, name in zip(reports, demangle([r["name"] for r in reports]), strict=True):
            report["demangled"] = name
        typer.echo(json.dumps(reports, indent=2))
    else:
        terminal = Console()
        render(reports, Console(width=min(terminal.width, WIDTH) if terminal.is_terminal else WIDTH))
