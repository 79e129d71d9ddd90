"""Compile drivers per arch (hipcc, ziglang clang, nvcc) and the content-addressed cache."""

from __future__ import annotations

from pathlib import Path

from workers.compilers.base import Compiler, CompileResult
from workers.compilers.hipcc import HipccCompiler
from workers.compilers.nvcc import NvccCompiler
from workers.compilers.zig_clang import ZigClangCompiler

HIP_SOURCES = Path(__file__).resolve().parents[2] / "kernels" / "sources" / "hip"
GPU_ARCHES: tuple[str, ...] = ("gfx906", "gfx90a", "gfx942", "gfx950", "sm_90")


def compiler_for_arch(arch: str) -> Compiler:
    """The driver that builds an arch; KeyError names the arches that have one."""
    for compiler in (HipccCompiler(), ZigClangCompiler(), NvccCompiler()):
        if arch in compiler.arches:
            return compiler
    raise KeyError(f"no compiler for arch {arch!r}; known: {', '.join(GPU_ARCHES)}")


def family_source(family: str) -> Path:
    """kernels/sources/hip/<family>.hip"""
    return HIP_SOURCES / f"{family}.hip"


__all__ = [
    "GPU_ARCHES",
    "HIP_SOURCES",
    "CompileResult",
    "Compiler",
    "HipccCompiler",
    "NvccCompiler",
    "ZigClangCompiler",
    "compiler_for_arch",
    "family_source",
]
