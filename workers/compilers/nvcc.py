"""nvcc for sm_90, compile only (``-cubin``): proves the HIP-dialect sources build for NVIDIA here.

The CUDA backend compiles with NVRTC at run time on the GPU host; this driver is the
compile-only check for CI and for ISA-free artifact caching.
"""

from __future__ import annotations

import glob
import shutil
from functools import cached_property
from pathlib import Path

from kernels.arches import arches_for_compiler
from workers.compilers.base import (
    COMMON_FLAGS,
    INCLUDE_DIR,
    CompileResult,
    define_flags,
    probe_version,
    run_compile,
)


def find_nvcc() -> str | None:
    """``nvcc`` on PATH, else the newest /usr/local/cuda*/bin/nvcc."""
    found = shutil.which("nvcc")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/local/cuda*/bin/nvcc"))
    return candidates[-1] if candidates else None


class NvccCompiler:
    name = "nvcc"
    arches: frozenset[str] = arches_for_compiler("nvcc")

    def __init__(self, nvcc: str | None = None) -> None:
        self.nvcc = nvcc or find_nvcc()

    @cached_property
    def _version(self) -> str:
        return probe_version([self.nvcc, "--version"]) if self.nvcc else ""

    def available(self) -> bool:
        return bool(self._version)

    def identity(self) -> str:
        return f"nvcc\n{self._version}" if self._version else ""

    def flags(self, arch: str) -> tuple[str, ...]:
        return ("-cubin", f"-arch={arch}", *COMMON_FLAGS)

    def compile(self, source: Path, arch: str, defines: dict[str, str], out_path: Path) -> CompileResult:
        if arch not in self.arches:
            return CompileResult(False, f"nvcc driver builds {sorted(self.arches)}, not {arch}", None)
        if not self.available() or self.nvcc is None:
            return CompileResult(False, "nvcc not found (PATH or /usr/local/cuda*/bin)", None)
        # nvcc splits -D values at commas: escape them
        escaped = {key: value.replace(",", "\\,") for key, value in defines.items()}
        argv = [
            self.nvcc, *self.flags(arch), f"-I{source.parent}", f"-I{INCLUDE_DIR}", *define_flags(escaped),
            "-x", "cu", str(source), "-o", str(out_path),
        ]  # fmt: skip
        return run_compile(argv, out_path)
