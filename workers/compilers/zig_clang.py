"""clang 22 from the ``ziglang`` wheel for gfx942 / gfx950: device-only, no ROCm headers or libraries.

The clang driver links the device code object by running ``lld -flavor gnu``; zig ships lld
only behind ``python -m ziglang ld.lld``. A two-line wrapper named ``ld.lld`` / ``lld`` in a
private directory put first on PATH drops ``-flavor gnu`` and execs zig's linker.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
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

_WRAPPER = """#!{python}
# Tunebase: clang's HIP driver runs `lld -flavor gnu ...`; zig's lld is `python -m ziglang ld.lld`.
import os, sys
args = sys.argv[1:]
if args[:1] == ["-flavor"]:
    args = args[2:]
os.execv({python!r}, [{python!r}, "-m", "ziglang", "ld.lld", *args])
"""


def _default_wrapper_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tunebase" / "zig-lld"


class ZigClangCompiler:
    name = "zig-clang"
    arches: frozenset[str] = arches_for_compiler("zig-clang")

    def __init__(self, python: str = sys.executable, wrapper_dir: Path | None = None) -> None:
        self.python = python
        self.wrapper_dir = wrapper_dir or _default_wrapper_dir()

    def ensure_wrapper(self) -> Path:
        """Write the ld.lld/lld wrappers (idempotent; atomic replace so parallel workers are safe)."""
        self.wrapper_dir.mkdir(parents=True, exist_ok=True)
        text = _WRAPPER.format(python=self.python)
        for name in ("ld.lld", "lld"):
            target = self.wrapper_dir / name
            if target.is_file() and target.read_text() == text:
                continue
            fd, tmp = tempfile.mkstemp(dir=self.wrapper_dir, prefix=f".{name}.")
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.chmod(tmp, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
            os.replace(tmp, target)
        return self.wrapper_dir

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{self.wrapper_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    @cached_property
    def _version(self) -> str:
        text = probe_version([self.python, "-m", "ziglang", "clang", "--version"])
        return text.splitlines()[0] if text else ""

    def available(self) -> bool:
        return bool(self._version)

    def identity(self) -> str:
        return f"ziglang-clang\n{self._version}" if self._version else ""

    def flags(self, arch: str) -> tuple[str, ...]:
        return (
            "-x", "hip", f"--offload-arch={arch}", "-nogpulib", "-nogpuinc", "--cuda-device-only",
            "--no-gpu-bundle-output", *COMMON_FLAGS,
        )  # fmt: skip

    def compile(self, source: Path, arch: str, defines: dict[str, str], out_path: Path) -> CompileResult:
        if arch not in self.arches:
            return CompileResult(False, f"zig clang driver builds {sorted(self.arches)}, not {arch}", None)
        if not self.available():
            return CompileResult(False, "python -m ziglang clang not available (pip install ziglang)", None)
        self.ensure_wrapper()
        argv = [
            self.python, "-m", "ziglang", "clang", *self.flags(arch), f"-I{source.parent}",
            f"-I{INCLUDE_DIR}",
            *define_flags(defines), "-c", str(source), "-o", str(out_path),
        ]  # fmt: skip
        return run_compile(argv, out_path, self.env)
