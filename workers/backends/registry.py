"""Which backend serves an arch (the arch table's ``backend`` column) and how to instantiate it.

A new GPU of a known backend is one row in kernels/arches.py; a new backend is one module plus one
branch here.
"""

from __future__ import annotations

from pathlib import Path

from kernels.arches import ARCHES, get_arch
from workers.backends.base import Backend

ARCH_BACKEND: dict[str, str] = {name: arch.backend for name, arch in ARCHES.items()}


def backend_name_for_arch(arch: str) -> str:
    try:
        return get_arch(arch).backend
    except KeyError:
        raise KeyError(f"no backend serves arch {arch!r}; known: {', '.join(ARCH_BACKEND)}") from None


def create_backend(name: str, artifact_dir: Path) -> Backend:
    """Instantiate a backend by name (imports lazily: GPU runtimes are optional)."""
    if name == "host":
        from workers.backends.host import HostBackend

        return HostBackend(artifact_dir=artifact_dir)
    if name == "cuda":
        from workers.backends.cuda import CudaBackend  # imports without cuda-python; detect() says None

        return CudaBackend(artifact_dir=artifact_dir)
    if name == "rocm":
        from workers.backends.rocm import RocmBackend  # no HIP import here: the harness is a subprocess

        return RocmBackend(artifact_dir=artifact_dir)
    raise KeyError(f"backend {name!r} is not available in this build")
