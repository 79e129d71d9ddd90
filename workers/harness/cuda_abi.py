"""How the CUDA backend binds to a decode kernel source: symbols, packing, arguments, geometry.

The backend is written against this small interface so the kernel library's ABI
(kernels/sources/hip/decode.hip + kernels/families/abi.py) and the test fixture
kernel (tests/fixtures/cuda/decode.hip) plug in the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from kernels.families.base import Variant
from kernels.reference import FP32, INT8_ACTIVATIONS, Problem, Tolerance

REPO = Path(__file__).resolve().parents[2]
FIXTURE_SOURCE = REPO / "tests" / "fixtures" / "cuda" / "decode.hip"
BASE_OPTIONS: tuple[str, ...] = ("--gpu-architecture=sm_90", "-std=c++17", "-default-device")


@dataclass(frozen=True)
class Geometry:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0
    extra: dict[str, int] = field(default_factory=dict, hash=False, compare=False)

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclass(frozen=True)
class Buffers:
    """Device pointers of one dispatch: weights (one rotated copy), activations, output, scratch."""

    weights: list[int]  # kernel-layout arrays in order (qs, scales[, mins])
    x: int
    y: int
    workspace: int = 0  # split-K partials, float32 [KB][M][N]
    counters: int = 0  # uint32 [grid.x], zero before the first launch


def weight_arrays(problem: Problem) -> list[np.ndarray]:
    """The kernel layout of a problem's weights (kernels.formats.packed), in argument order."""
    packed = problem.packed
    if packed is None:
        raise ValueError(f"{problem.format.name}: no kernel-layout packing")
    arrays = [packed.qs, packed.scales]
    if packed.mins is not None:
        arrays.append(packed.mins)
    return [np.ascontiguousarray(a) for a in arrays]


class KernelBinding(Protocol):
    name: str
    source_path: Path

    def formats(self) -> tuple[str, ...]: ...

    def options(self, format_name: str) -> list[str]:
        """NVRTC options (defines included) of the compiled unit serving a format."""
        ...

    def symbol(self, variant: Variant) -> str:
        """The name expression of one variant (a plain extern "C" name or a template instance)."""
        ...

    def tolerance(self, format_name: str) -> Tolerance: ...

    def geometry(self, variant: Variant, n: int, k: int, m: int, sm_count: int) -> Geometry: ...

    def args(
        self, buffers: Buffers, m: int, n: int, k: int, geo: Geometry
    ) -> list[tuple[str, int | float]]: ...


class FixtureBinding:
    """tests/fixtures/cuda/decode.hip: fp32 activations, group-32 formats, warp per row."""

    name = "fixture"
    WARPS_PER_BLOCK = 8

    def __init__(self, source_path: Path = FIXTURE_SOURCE) -> None:
        self.source_path = source_path

    def formats(self) -> tuple[str, ...]:
        from kernels.formats.packing import PACKABLE, format_kind

        return tuple(f for f in PACKABLE if format_kind(f).group == 32)

    def options(self, format_name: str) -> list[str]:
        return list(BASE_OPTIONS)

    def symbol(self, variant: Variant) -> str:
        return f"tb_decode<{variant.params['kb']}, {variant.params['tw']}, true>"

    def tolerance(self, format_name: str) -> Tolerance:
        from kernels.formats.packing import EXACT

        # fp32 activations; non-exact formats carry an fp16-rounded scale*sub-scale product
        return FP32 if format_name in EXACT else INT8_ACTIVATIONS

    def geometry(self, variant: Variant, n: int, k: int, m: int, sm_count: int) -> Geometry:
        warps = self.WARPS_PER_BLOCK
        want = max(1, sm_count * int(variant.params["tw"]) // warps)
        return Geometry((max(1, min(want, -(-n // warps))), 1, 1), (32 * warps, 1, 1))

    def args(self, buffers: Buffers, m: int, n: int, k: int, geo: Geometry) -> list[tuple[str, int | float]]:
        w = buffers.weights
        mins = w[2] if len(w) > 2 else 0
        return [
            ("ptr", w[0]), ("ptr", w[1]), ("ptr", mins), ("ptr", buffers.x), ("ptr", buffers.y),
            ("i32", m), ("i32", n), ("i32", k),
        ]  # fmt: skip


SOURCE_ENV = "TUNEBASE_CUDA_DECODE_SOURCE"  # a decode source with the library's ABI (A/B of kernels)


def default_binding() -> KernelBinding:
    """The kernel library's binding, or ``$TUNEBASE_CUDA_DECODE_SOURCE`` (same ABI) for an A/B."""
    import os

    from workers.harness.cuda_library import LibraryBinding

    override = os.environ.get(SOURCE_ENV, "")
    return LibraryBinding(Path(override).resolve()) if override else LibraryBinding()
