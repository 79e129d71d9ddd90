"""Debian's hipcc (ROCm 5.2, clang 15) for gfx906 / gfx90a: ``--genco`` offload bundles, no GPU needed."""

from __future__ import annotations

import os
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


class HipccCompiler:
    name = "hipcc"
    arches: frozenset[str] = arches_for_compiler("hipcc")

    def __init__(self, hipcc: str = "hipcc") -> None:
        self.hipcc = hipcc

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "HIP_PLATFORM": "amd"}  # Debian's hipcc would otherwise guess

    def available(self) -> bool:
        return shutil.which(self.hipcc) is not None and bool(self.identity())

    @cached_property
    def _version(self) -> str:
        path = shutil.which(self.hipcc)
        return probe_version([path, "--version"], self.env) if path else ""

    def identity(self) -> str:
        return f"hipcc\n{self._version}" if self._version else ""

    def flags(self, arch: str) -> tuple[str, ...]:
        return ("--genco", f"--offload-arch={arch}", *COMMON_FLAGS)

    def compile(self, source: Path, arch: str, defines: dict[str, str], out_path: Path) -> CompileResult:
        if arch not in self.arches:
            return CompileResult(False, f"hipcc driver builds {sorted(self.arches)}, not {arch}", None)
        if not self.available():
            return CompileResult(
                False, f"{self.hipcc} not found (apt-get install hipcc rocm-device-libs)", None
            )
        argv = [
            self.hipcc, *self.flags(arch), f"-I{source.parent}", f"-I{INCLUDE_DIR}", *define_flags(defines),
            str(source), "-o", str(out_path),
        ]  # fmt: skip
        return run_compile(argv, out_path, self.env)
