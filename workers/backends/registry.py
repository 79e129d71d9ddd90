"""Which backend serves an arch. A new GPU family is one module plus one line here."""

from __future__ import annotations

from pathlib import Path

from workers.backends.base import Backend

ARCH_BACKEND: dict[str, str] = {
    "host": "host",
    "gfx906": "rocm",
    "gfx90a": "rocm",
    "gfx942": "rocm",
    "gfx950": "rocm",
    "sm_90": "cuda",
}


def backend_name_for_arch(arch: str) -> str:
    try:
        return ARCH_BACKEND[arch]
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


def backend_support(arch: str, phase: str, format_name: str) -> str | None:
    """Why no backend of this build could run the point, or None when one can (checked at submit time)."""
    name = backend_name_for_arch(arch)
    if name == "host":
        from workers.backends.host import HostBackend

        return HostBackend(artifact_dir=Path(".")).supports(arch, phase, format_name)  # no I/O in __init__
    if name == "rocm":
        from workers.backends.rocm import RocmBackend

        return RocmBackend(artifact_dir=Path(".")).supports(arch, phase, format_name)  # no I/O in __init__
    return None  # remote workers of other backends decide for themselves
