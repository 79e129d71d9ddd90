"""The real hip-python bindings over a fake device: tests/rocm/fake_device/libamdhip64.c, built here.

hip-python (the `rocm` extra) opens ``libamdhip64.so`` with dlopen, so a harness subprocess whose
LD_LIBRARY_PATH starts with the fake's folder runs hip-python's own Cython wrappers against a device
made of host memory. Nothing of hip-python is replaced.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE_DEVICE_SOURCE = Path(__file__).resolve().parent / "fake_device" / "libamdhip64.c"


def build_fake_device(out: Path, *defines: str) -> Path:
    """Compile the fake runtime as out/libamdhip64.so; returns the folder to put on LD_LIBRARY_PATH."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("no C compiler: the fake device library cannot be built")
    out.mkdir(parents=True, exist_ok=True)
    argv = [compiler, "-O2", "-Wall", "-Werror", "-D_GNU_SOURCE", *(f"-D{d}" for d in defines),
            "-shared", "-fPIC", "-o", str(out / "libamdhip64.so"), str(FAKE_DEVICE_SOURCE)]  # fmt: skip
    subprocess.run(argv, check=True, timeout=120, capture_output=True)
    return out


@pytest.fixture(scope="session")
def hip_python() -> str:
    """hip-python must be installed (`pip install -e '.[dev,rocm]'`, which `make venv` does)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hip-python")
    except PackageNotFoundError:
        pytest.fail("hip-python is not installed: pip install -e '.[dev,rocm]' (make venv does)")


@pytest.fixture(scope="session")
def fake_device(tmp_path_factory: pytest.TempPathFactory, hip_python: str) -> Path:
    return build_fake_device(tmp_path_factory.mktemp("fake-device"))


def device_env(device_dir: Path, log: Path, **extra: str) -> dict[str, str]:
    """The harness environment: the repository on PYTHONPATH, the fake device first on the loader path."""
    library_path = os.pathsep.join(p for p in (str(device_dir), os.environ.get("LD_LIBRARY_PATH", "")) if p)
    return {**os.environ, "PYTHONPATH": str(REPO), "LD_LIBRARY_PATH": library_path,
            "FAKE_HIP_LOG": str(log), **extra}  # fmt: skip
