"""The one arch table: every arch list, queue name, compiler choice and occupancy formula derives from it.

A new GPU is one row here (plus, for a new backend, one backend module). Figures come from the vendors'
documentation and LLVM's AMDGPU backend (AMDGPUBaseInfo.cpp / GCNSubtarget.cpp), which is what the
compiler's own occupancy remark uses; see workers/isa/occupancy.py for the formulas.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class IsaLimits:
    """Per-SIMD register files and per-CU LDS of an AMD arch (what bounds waves per SIMD)."""

    vgprs_per_simd: int  # per lane
    vgpr_granule: int
    unified_agprs: bool  # AGPRs share the VGPR file (gfx90a and later)
    max_waves_per_simd: int
    sgprs_per_simd: int = 800
    sgpr_granule: int = 16
    max_sgprs_per_wave: int = 102
    lds_granule: int = 512
    max_workgroups_per_cu: int = 16
    max_workgroups_per_cu_single_wave: int = 40
    simds_per_cu: int = 4


@dataclass(frozen=True)
class Arch:
    name: str
    backend: str  # host | rocm | cuda: which backend module runs it
    label: str  # the hardware people know it as
    compiler: str  # cc | hipcc | zig-clang | nvcc: which driver builds its code objects
    wave: int  # threads per wave / warp (host: 1)
    cus: int  # compute units / SMs of the reference part (launch expressions when no device is attached)
    lds_per_cu: int  # bytes of LDS / shared memory per CU (SM)
    llc_bytes: int  # last-level cache when the runtime does not report it (weights rotate past 2x this)
    isa: IsaLimits | None = None  # AMD occupancy limits; None where the ISA readers do not apply

    @property
    def queue(self) -> str:
        """The Celery queue workers of this arch consume."""
        return f"arch.{self.name}"


_GCN5 = IsaLimits(vgprs_per_simd=256, vgpr_granule=4, unified_agprs=False, max_waves_per_simd=10)
_CDNA2 = IsaLimits(vgprs_per_simd=512, vgpr_granule=8, unified_agprs=True, max_waves_per_simd=8)

ARCHES: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("gfx906", "rocm", "MI50/MI60", "hipcc", 64, 60, 64 << 10, 4 << 20, _GCN5),
        Arch("gfx908", "rocm", "MI100", "hipcc", 64, 120, 64 << 10, 8 << 20, _GCN5),
        Arch("gfx90a", "rocm", "MI210/MI250X", "hipcc", 64, 104, 64 << 10, 8 << 20, _CDNA2),
        Arch("gfx942", "rocm", "MI300X", "zig-clang", 64, 304, 64 << 10, 256 << 20, _CDNA2),
        Arch("gfx950", "rocm", "MI355X", "zig-clang", 64, 256, 160 << 10, 256 << 20, _CDNA2),
        Arch("sm_90", "cuda", "H100/H200", "nvcc", 32, 132, 228 << 10, 50 << 20),
        Arch("host", "host", "the CPU", "cc", 1, 1, 0, 32 << 20),
    )
}
ARCH_NAMES: tuple[str, ...] = tuple(ARCHES)
BACKENDS: tuple[str, ...] = tuple(dict.fromkeys(a.backend for a in ARCHES.values()))


# a query filter that names a registered arch (API: a typo is a 422 naming the choices, not an empty page)
ARCH_PATTERN = "^(" + "|".join(re.escape(name) for name in sorted(ARCHES)) + ")$"


def get_arch(name: str) -> Arch:
    try:
        return ARCHES[name]
    except KeyError:
        raise KeyError(f"unknown arch {name!r}; known: {', '.join(ARCH_NAMES)}") from None


def arches_for_backend(backend: str) -> tuple[str, ...]:
    return tuple(a.name for a in ARCHES.values() if a.backend == backend)


def arches_for_compiler(compiler: str) -> frozenset[str]:
    return frozenset(a.name for a in ARCHES.values() if a.compiler == compiler)


def gpu_arches() -> tuple[str, ...]:
    return tuple(a.name for a in ARCHES.values() if a.backend != "host")


def require_arch(name: str) -> str:
    """``name`` when it is a row of the table, else ValueError naming the rows (pydantic validators)."""
    if name not in ARCHES:
        raise ValueError(f"unknown arch {name!r}; known: {', '.join(ARCH_NAMES)}")
    return name
