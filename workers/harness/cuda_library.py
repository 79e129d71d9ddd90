"""Binding to the kernel library's decode source (kernels/sources/hip/decode.hip) for NVRTC/sm_90.

Argument order and launch geometry follow the ABI comment in decode.hip; the geometry
comes from kernels/families/abi.py (decode_launch) when it exists, so both sides agree.
"""

from __future__ import annotations

import math
from pathlib import Path

from kernels.families.base import Variant
from kernels.reference import INT8_ACTIVATIONS, Tolerance
from workers.harness.cuda_abi import BASE_OPTIONS, REPO, Buffers, Geometry

LIBRARY_SOURCE = REPO / "kernels" / "sources" / "hip" / "decode.hip"
THREADS = 256
WAVE = 32


def _fallback_launch(kb: int, tw: int, n: int, sm_count: int) -> tuple[int, int]:
    """(grid_x, rows_per_wave) aiming at about tw * SMs waves in total (used until abi.py exists)."""
    waves_per_block = THREADS // WAVE
    target = max(1, tw * sm_count)
    rows_per_wave = max(1, math.ceil(n * kb / target))
    grid_x = math.ceil(n / (rows_per_wave * waves_per_block))
    return grid_x, rows_per_wave


class LibraryBinding:
    name = "library"

    def __init__(self, source_path: Path = LIBRARY_SOURCE) -> None:
        if not source_path.is_file():
            raise FileNotFoundError(source_path)
        self.source_path = source_path

    def formats(self) -> tuple[str, ...]:
        from kernels.formats.packing import PACKABLE

        return tuple(PACKABLE)

    def options(self, format_name: str) -> list[str]:
        from kernels.formats.packing import format_kind

        defines = [f"-D{key}={value}" for key, value in sorted(format_kind(format_name).defines.items())]
        return [*BASE_OPTIONS, *defines]

    def symbol(self, variant: Variant) -> str:
        return f"tb_decode_kb{variant.params['kb']}_tw{variant.params['tw']}"

    def tolerance(self, format_name: str) -> Tolerance:
        return INT8_ACTIVATIONS  # activations are quantised to int8 per 32-block inside the kernel

    def geometry(self, variant: Variant, n: int, k: int, m: int, sm_count: int) -> Geometry:
        kb, tw = int(variant.params["kb"]), int(variant.params["tw"])
        try:
            from kernels.families import abi  # type: ignore[attr-defined]

            launch = abi.decode_launch(kb=kb, tw=tw, n=n, k=k, m=m, compute_units=sm_count, wave=WAVE)
            grid = tuple(int(v) for v in launch.grid)
            block = tuple(int(v) for v in launch.block)
            rows_per_wave = int(launch.rows_per_wave)
            return Geometry(
                (grid[0], grid[1], grid[2]),
                (block[0], block[1], block[2]),
                0,
                {"rows_per_wave": rows_per_wave},
            )
        except (ImportError, AttributeError, TypeError):
            grid_x, rows_per_wave = _fallback_launch(kb, tw, n, sm_count)
            return Geometry((grid_x, kb, 1), (THREADS, 1, 1), 0, {"rows_per_wave": rows_per_wave})

    def args(self, buffers: Buffers, m: int, n: int, k: int, geo: Geometry) -> list[tuple[str, int | float]]:
        w = buffers.weights
        mins = w[2] if len(w) > 2 else 0
        return [
            ("ptr", w[0]), ("ptr", w[1]), ("ptr", mins), ("ptr", buffers.x), ("ptr", buffers.y),
            ("ptr", buffers.workspace), ("ptr", buffers.counters),
            ("i32", m), ("i32", n), ("i32", k), ("i32", geo.extra.get("rows_per_wave", 1)),
        ]  # fmt: skip
