"""Real code objects for the ISA tests: hipcc for gfx906/gfx90a, ziglang's clang 22 for gfx942/gfx950."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "isa"
HIPCC_ARCHS = ("gfx906", "gfx90a")
ZIG_ARCHS = ("gfx942", "gfx950")
COMPILE_TIMEOUT_S = 300


def _lld_wrappers(bin_dir: Path) -> None:
    """clang's amdgcn link step runs ``lld -flavor gnu``; zig ships lld as ``python -m ziglang ld.lld``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = (
        '#!/bin/sh\nif [ "$1" = "-flavor" ]; then shift 2; fi\n'
        f'exec {sys.executable} -m ziglang ld.lld "$@"\n'
    )
    for name in ("lld", "ld.lld"):
        path = bin_dir / name
        path.write_text(script)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def compile_kernel(source: Path, arch: str, out_dir: Path) -> Path:
    out = out_dir / f"{source.stem}_{arch}.co"
    if out.is_file():
        return out
    if arch in HIPCC_ARCHS:
        if shutil.which("hipcc") is None:
            pytest.skip("hipcc not installed (Debian package hipcc)")
        argv = ["hipcc", "--genco", f"--offload-arch={arch}", "-O3", str(source), "-o", str(out)]
        env = {**os.environ, "HIP_PLATFORM": "amd"}
    else:
        bin_dir = out_dir / "bin"
        _lld_wrappers(bin_dir)
        argv = [
            sys.executable,
            "-m",
            "ziglang",
            "clang",
            "-x",
            "hip",
            f"--offload-arch={arch}",
            "-nogpulib",
            "-nogpuinc",
            "--cuda-device-only",
            "--no-gpu-bundle-output",
            "-O3",
            "-c",
            str(source),
            "-o",
            str(out),
        ]
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, env=env, check=False
    )
    assert proc.returncode == 0, f"{argv}\n{proc.stderr}"
    return out


@pytest.fixture(scope="session")
def isa_build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("isa_build")


@pytest.fixture(scope="session")
def code_object(isa_build_dir: Path):  # type: ignore[no-untyped-def]
    """code_object(stem, arch) → path of the compiled fixture kernel (compiled once per session)."""

    def build(stem: str, arch: str) -> Path:
        return compile_kernel(FIXTURES / f"{stem}.hip", arch, isa_build_dir)

    return build


TRITON = FIXTURES / "triton"
ASM_ARCHS = ("gfx90a", "gfx942", "gfx950")


def assemble(source: Path, arch: str, out_dir: Path) -> Path:
    """A hand-written .s (``@ARCH@`` replaced) assembled by ziglang's clang 22 and linked by its lld."""
    out = out_dir / f"{source.stem}_{arch}.co"
    if out.is_file():
        return out
    text = source.read_text().replace("@ARCH@", arch)
    src = out_dir / f"{source.stem}_{arch}.s"
    src.write_text(text)
    obj = out_dir / f"{source.stem}_{arch}.o"
    for argv in (
        [sys.executable, "-m", "ziglang", "clang", "-x", "assembler", "-target", "amdgcn-amd-amdhsa",
         f"-mcpu={arch}", "-c", str(src), "-o", str(obj)],
        [sys.executable, "-m", "ziglang", "ld.lld", "-shared", str(obj), "-o", str(out)],
    ):  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
        assert proc.returncode == 0, f"{argv}\n{proc.stderr}"
    return out


@pytest.fixture(scope="session")
def asm_object(isa_build_dir: Path):  # type: ignore[no-untyped-def]
    """asm_object(stem, arch) → path of the assembled hand-written fixture kernel."""

    def build(stem: str, arch: str) -> Path:
        return assemble(FIXTURES / f"{stem}.s", arch, isa_build_dir)

    return build
