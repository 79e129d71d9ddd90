"""`tunebase isa FILE [--json]`: resources, occupancy, census and diagnosis of a code object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from workers.isa.analyze import analyze_file
from workers.isa.bundle import NotACodeObject


def render(reports: list[dict[str, Any]], console: Console) -> None:
    table = Table(title="AMDGPU kernels")
    for column in (
        "kernel",
        "arch",
        "VGPR",
        "AGPR",
        "SGPR",
        "LDS B",
        "scratch B",
        "spills v/s",
        "waves/SIMD",
        "limiter",
    ):
        table.add_column(column, overflow="fold")
    for r in reports:
        table.add_row(
            r["name"],
            r["arch"],
            str(r["vgpr"]),
            str(r["agpr"]),
            str(r["sgpr"]),
            str(r["lds_bytes"]),
            str(r["scratch_bytes"]),
            f"{r['vgpr_spills']}/{r['sgpr_spills']}",
            str(r["waves_per_simd"]),
            str(r["limiter"]),
        )
    console.print(table)
    for r in reports:
        census = r.get("census") or {}
        loop = census.get("hottest_loop")
        if loop:
            counts = {k: v for k, v in loop["counts"].items() if v}
            console.print(f"[bold]{r['name']}[/bold] hottest loop {loop['start']}..{loop['end']}: {counts}")
        for line in r["diagnosis"]:
            console.print(f"  [bold]{r['name']}[/bold]: {line}")


def isa(
    file: Path = typer.Argument(..., help="AMDGPU code object (.co/.hsaco) or clang offload bundle"),
    as_json: bool = typer.Option(False, "--json", help="print the per-kernel reports as JSON"),
) -> None:
    """Analyse an AMDGPU code object: resources, occupancy, instruction census, diagnosis."""
    try:
        reports = analyze_file(file)
    except NotACodeObject as exc:
        Console(stderr=True).print(f"[red]error:[/red] {file}: {exc}")
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(reports, indent=2))
    else:
        render(reports, Console())
