"""The backend plug-in point: compile a family's variants, time them per dispatch, check parity."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kernels.families.base import Variant
from kernels.packages.package import KernelPackage
from kernels.reference import Parity


@dataclass(frozen=True)
class DeviceInfo:
    """What makes results comparable (DESIGN §5.6): arch, CU count, driver/runtime, toolchain."""

    backend: str
    arch: str
    name: str
    compute_units: int
    uuid: str
    driver_version: str = ""
    runtime_version: str = ""


@dataclass(frozen=True)
class TaskSpec:
    """One (arch, phase, format, shape, M) point: all its variants are timed together, interleaved."""

    arch: str
    phase: str
    format: str
    shape: str
    n: int
    k: int
    m: int
    variants: tuple[str, ...]
    min_dispatches: int = 20
    max_dispatches: int = 200
    warmup: int = 3
    seed: int = 0
    warm_cache: bool = False
    strategy: str = "exhaustive"  # or "race": drop variants shown slower, spend dispatches on survivors
    kernel: str = ""  # package name (DESIGN §9); "" = the phase's built-in package
    kernel_version: str = ""  # package content sha256
    kernel_root: str = ""  # folder holding the package's manifest and sources on this machine


@dataclass
class ArtifactInfo:
    """A compiled unit (one per family x format x arch); variants are symbols inside it."""

    cache_key: str
    path: str
    source_hash: str
    toolchain: str
    flags: tuple[str, ...]
    compiled: bool  # False when it came from the cache
    ok: bool = True
    log: str = ""
    resources: dict[str, dict[str, object]] = field(default_factory=dict)  # per variant symbol


@dataclass
class UnitCompile:
    """One translation unit compiled ahead of the GPU (the compile queue), without a device."""

    unit: str  # the artifact's path (or file name) in the shared artifact directory
    cache_key: str
    variants: int
    ok: bool
    compiled: bool  # False: it was in the cache already (or another process compiled it while we waited)
    seconds: float  # compiler time spent by this call
    waited_s: float | None = None  # waiting for another compiler of the same key (None: gave up waiting)
    log: str = ""


@dataclass
class Dispatch:
    seq: int  # global order inside the task (interleaving is visible)
    device_ns: int  # profiler / in-harness monotonic clock around the kernel only
    wall_ns: int  # host wall clock around the whole launch, kept beside it
    buffer_index: int  # which rotated weight copy was read
    event_ns: int | None = None  # CUDA-event time around the launch (cuda backend), beside the profiler's


@dataclass
class VariantResult:
    variant: str
    dispatches: list[Dispatch]
    parity: Parity | None
    error: str | None = None
    symbol: str = ""


@dataclass
class TaskResult:
    device: DeviceInfo
    artifact: ArtifactInfo
    results: list[VariantResult]
    weight_copies: int = 1


ProgressCallback = Callable[[int, int], None]  # (dispatches done, dispatches planned)


class Backend(Protocol):
    name: str

    def detect(self) -> DeviceInfo | None:
        """The device this process is pinned to, or None when this backend cannot run here."""
        ...

    def supports(self, arch: str, phase: str, format_name: str) -> str | None:
        """None when the backend can run this point, else the reason it cannot."""
        ...

    def run_task(self, spec: TaskSpec, progress: ProgressCallback | None = None) -> TaskResult:
        """Compile (through the artifact cache), time all variants interleaved, check parity."""
        ...


class Precompiler(Protocol):
    """A backend that can fill the artifact cache without a device (DESIGN §8: compilation may run on
    CPU workers so GPUs only time); optional: the compile queue skips backends without it."""

    def precompile(
        self, package: KernelPackage, arch: str, format_name: str, variants: list[Variant]
    ) -> list[UnitCompile]:
        """Compile through the cache exactly what ``run_task`` would build for these variants."""
        ...
