"""Kernel ABI of kernels/sources/hip/{decode,prefill}.hip, as data: what a GPU backend launches.

The ROCm and CUDA backends marshal arguments and compute launch geometry from this module
only, so the kernel sources and the launchers cannot drift apart silently (the argument
lists below are compared with the comment block at the top of each source by a test).

Compiled units: one per (family, format kind, arch); ``-DTB_ASYMMETRIC`` / ``-DTB_GROUP``
from ``kernels.formats.packing.format_kind(fmt).defines``; one ``extern "C" __global__``
symbol per variant (``symbol``). Pointers are device pointers, ints are 32-bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kernels.families.base import Variant

THREADS = 256  # every kernel is launched with block = (256, 1, 1)
MAX_DECODE_M = 4  # decode kernels keep 4 activation rows in registers


@dataclass(frozen=True)
class KernelArg:
    """One kernel parameter: its name, C type, and what a launcher must pass."""

    name: str
    ctype: str
    doc: str

    @property
    def is_pointer(self) -> bool:
        return self.ctype.endswith("*")


# Both families take the same operands first; they differ in what follows.
_OPERANDS: tuple[KernelArg, ...] = (
    KernelArg("qs", "const int8_t *", "[N][K] packed weight values"),
    KernelArg("scales", "const uint16_t *", "[N][K/group] fp16 bits"),
    KernelArg("mins", "const uint16_t *", "[N][K/group] fp16 bits; NULL for symmetric kinds"),
    KernelArg("x", "const float *", "[M][K] activations"),
    KernelArg("y", "float *", "[M][N] output, fully overwritten"),
)

DECODE_ARGS: tuple[KernelArg, ...] = (
    *_OPERANDS,
    KernelArg("workspace", "float *", "[KB][M][N] split-K partials; NULL allowed when KB == 1"),
    KernelArg("counters", "uint32_t *", "[grid.x] zeroed once before the first launch; kernels leave them 0"),
    KernelArg("m", "int", "1..4"),
    KernelArg("n", "int", "rows of W"),
    KernelArg("k", "int", "multiple of the format's block size"),
    KernelArg("rows_per_wave", "int", "Launch.rows_per_wave"),
)

PREFILL_ARGS: tuple[KernelArg, ...] = (
    *_OPERANDS,
    KernelArg("m", "int", "activation rows"),
    KernelArg("n", "int", "rows of W"),
    KernelArg("k", "int", "multiple of the format's block size"),
)

ARGS: dict[str, tuple[KernelArg, ...]] = {"decode": DECODE_ARGS, "prefill": PREFILL_ARGS}
SOURCES: dict[str, str] = {"decode": "decode.hip", "prefill": "prefill.hip"}  # in kernels/sources/hip/


@dataclass(frozen=True)
class Launch:
    """Launch geometry of one dispatch; unpacks as ``grid, block, shared_bytes``."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0  # dynamic LDS; the sources use static LDS only
    rows_per_wave: int = 1  # decode: the ``rows_per_wave`` kernel argument
    workspace_bytes: int = 0  # decode KB > 1: float32 [KB][M][N]
    counters: int = 0  # decode KB > 1: uint32 count (== grid.x), zeroed once
    scalars: dict[str, int] = field(default_factory=dict, compare=False)  # int args by name

    def __iter__(self) -> Iterator[Any]:
        return iter((self.grid, self.block, self.shared_bytes))


def symbol(variant: Variant) -> str:
    """The exported kernel name of a variant."""
    p = variant.params
    if variant.family == "decode":
        return f"tb_decode_kb{p['kb']}_tw{p['tw']}"
    if variant.family == "prefill":
        return f"tb_prefill_n{p['n_tile']}_mt{p['m_tile']}_mb{p['min_blocks']}_u{p['unroll']}"
    raise ValueError(f"no GPU kernels for family {variant.family!r}")


def _decode_params(variant: Variant | str | None, kb: int | None, tw: int | None) -> tuple[int, int]:
    if variant is not None:
        if isinstance(variant, str):
            from kernels.families.decode import DecodeFamily

            variant = DecodeFamily().parse(variant, "rocm")
        return int(variant.params["kb"]), int(variant.params["tw"])
    if kb is None or tw is None:
        raise TypeError("decode_launch needs a variant or kb= and tw=")
    return kb, tw


def decode_launch(
    n: int,
    k: int,
    m: int,
    variant: Variant | str | None = None,
    compute_units: int = 1,
    wave_size: int | None = None,
    *,
    kb: int | None = None,
    tw: int | None = None,
    wave: int | None = None,
) -> Launch:
    """Decode geometry: about ``tw * compute_units`` waves in flight in total.

    Each of the KB split-K slices (grid.y) gets ``tw * CUs / KB`` waves as a target; a wave
    handles ``rows_per_wave`` consecutive rows, a workgroup ``256 / wave_size`` waves.
    ``wave_size`` (alias ``wave``) is 64 on gfx9, 32 on NVIDIA.
    """
    kb_, tw_ = _decode_params(variant, kb, tw)
    ws = wave_size if wave_size is not None else wave
    if ws not in (32, 64):
        raise ValueError(f"wave size must be 32 or 64, got {ws}")
    if not 1 <= m <= MAX_DECODE_M:
        raise ValueError(f"decode kernels take M = 1..{MAX_DECODE_M}, got {m}")
    if n <= 0 or k <= 0 or k % 32 or compute_units <= 0:
        raise ValueError(f"bad decode problem n={n} k={k} compute_units={compute_units}")
    waves_per_wg = THREADS // ws
    target_per_slice = max(1, tw_ * compute_units // kb_)
    rows_per_wave = max(1, math.ceil(n / target_per_slice))
    grid_x = math.ceil(n / (rows_per_wave * waves_per_wg))
    workspace = 4 * kb_ * m * n if kb_ > 1 else 0
    counters = grid_x if kb_ > 1 else 0
    return Launch(
        grid=(grid_x, kb_, 1),
        block=(THREADS, 1, 1),
        shared_bytes=0,
        rows_per_wave=rows_per_wave,
        workspace_bytes=workspace,
        counters=counters,
        scalars={"m": m, "n": n, "k": k, "rows_per_wave": rows_per_wave},
    )


def prefill_launch(
    n: int,
    k: int,
    m: int,
    variant: Variant | str,
    compute_units: int = 1,
    wave_size: int | None = None,
) -> Launch:
    """Prefill geometry: one 256-thread workgroup per (n_tile x m_tile) output tile."""
    if isinstance(variant, str):
        from kernels.families.prefill import PrefillFamily

        variant = PrefillFamily().parse(variant, "rocm")
    if n <= 0 or m <= 0 or k <= 0 or k % 32:
        raise ValueError(f"bad prefill problem n={n} k={k} m={m}")
    nt, mt = int(variant.params["n_tile"]), int(variant.params["m_tile"])
    return Launch(
        grid=(math.ceil(n / nt), math.ceil(m / mt), 1),
        block=(THREADS, 1, 1),
        shared_bytes=0,
        scalars={"m": m, "n": n, "k": k},
    )
