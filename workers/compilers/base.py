"""The compiler plug-in point: turn one kernel source into one code object for one arch."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kernels.packages.loader import INCLUDE_DIR  # noqa: F401  (re-exported: headers every package may include)

COMPILE_TIMEOUT_S = 600  # a whole family (40 prefill variants) in one translation unit
PROBE_TIMEOUT_S = 30
COMMON_FLAGS: tuple[str, ...] = ("-O3", "-std=c++17")


@dataclass
class CompileResult:
    """Outcome of one compile; never an exception for compiler errors (the log says why)."""

    ok: bool
    log: str
    path: Path | None


class Compiler(Protocol):
    name: str
    arches: frozenset[str]

    def identity(self) -> str:
        """Compiler name and full version; part of every cache key (DESIGN §5.6)."""
        ...

    def flags(self, arch: str) -> tuple[str, ...]:
        """Flags that change the binary (without defines, source, output)."""
        ...

    def compile(self, source: Path, arch: str, defines: dict[str, str], out_path: Path) -> CompileResult:
        """Compile ``source`` (its directory on the include path) to ``out_path``."""
        ...


def run_tool(
    argv: list[str], timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """argv-list subprocess with a timeout; output captured as text."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, env=env)


def define_flags(defines: dict[str, str]) -> list[str]:
    return [f"-D{key}={value}" for key, value in sorted(defines.items())]


def run_compile(argv: list[str], out_path: Path, env: dict[str, str] | None = None) -> CompileResult:
    """Run a compiler command; ok only when it exits 0 and wrote a non-empty ``out_path``."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        proc = run_tool(argv, COMPILE_TIMEOUT_S, env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return CompileResult(False, f"{' '.join(argv)}\n{type(exc).__name__}: {exc}", None)
    log = (" ".join(argv) + "\n" + proc.stdout + proc.stderr).strip()
    ok = proc.returncode == 0 and out_path.is_file() and out_path.stat().st_size > 0
    return CompileResult(ok, log, out_path if ok else None)


def probe_version(argv: list[str], env: dict[str, str] | None = None) -> str:
    """Combined stdout+stderr of a ``--version`` call; '' when the tool is missing."""
    try:
        proc = run_tool(argv, PROBE_TIMEOUT_S, env)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if proc.returncode != 0:
        return ""
    return (proc.stdout + proc.stderr).strip()
