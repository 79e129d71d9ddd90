"""Compile drivers per arch (hipcc, ziglang clang, nvcc) and the content-addressed cache.

Which driver builds an arch is the arch table's ``compiler`` column (kernels/arches.py).
"""

from __future__ import annotations

from kernels.arches import get_arch, gpu_arches
from workers.compilers.base import Compiler, CompileResult
from workers.compilers.hipcc import HipccCompiler
from workers.compilers.nvcc import NvccCompiler
from workers.compilers.zig_clang import ZigClangCompiler

DRIVERS: dict[str, type[HipccCompiler] | type[ZigClangCompiler] | type[NvccCompiler]] = {
    "hipcc": HipccCompiler,
    "zig-clang": ZigClangCompiler,
    "nvcc": NvccCompiler,
}


def compiler_for_arch(arch: str) -> Compiler:
    """The driver that builds an arch; KeyError names the arches that have one."""
    try:
        driver = DRIVERS[get_arch(arch).compiler]
    except KeyError:
        raise KeyError(f"no compiler for arch {arch!r}; known: {', '.join(gpu_arches())}") from None
    return driver()


__all__ = [
    "DRIVERS",
    "CompileResult",
    "Compiler",
    "HipccCompiler",
    "NvccCompiler",
    "ZigClangCompiler",
    "compiler_for_arch",
]
