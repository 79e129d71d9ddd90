"""Registers and local memory of a package's CUDA variants, read from NVRTC's own ptxas report.

Why: the cubins the H200 runs come from NVRTC, and its register allocation differs from a local
``nvcc -Xptxas -v`` of the same source (twice a variant that nvcc compiled cleanly spilled on the
device). NVRTC needs no GPU, so the exact compiler of the device (the pinned ``nvidia-cuda-nvrtc``
wheel) can judge every variant here, in CI, before a device minute is spent.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from kernels.packages.package import KernelPackage

PTXAS_VERBOSE = "--ptxas-options=-v"

_ENTRY = re.compile(r"Compiling entry function '(\S+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
# ptxas' C7510-C7520 notes: it inserted waits between the asynchronous wgmma (each then runs alone); most end
# "in the function 'f'", C7512 (insufficient register resources) "for the function 'f'"
_SERIALIZED = re.compile(
    r"wgmma\.mma_async instructions are serialized due to .* (?:in|for) the function '(\S+)'"
)


@dataclass(frozen=True)
class KernelResources:
    registers: int
    stack_frame: int
    spill_stores: int
    spill_loads: int
    wgmma_serialized: bool = False

    @property
    def spills(self) -> bool:
        """Any local memory: a stack frame is local memory too (an indexed register array)."""
        return bool(self.stack_frame or self.spill_stores or self.spill_loads)


def parse_ptxas_report(log: str) -> dict[str, KernelResources]:
    """Per lowered entry name, ptxas' 'Used N registers' and its stack/spill line (ptxas -v through NVRTC),
    and whether ptxas serialised its wgmma (a note naming the function, wherever it stands in the log)."""
    found: dict[str, KernelResources] = {}
    serialized = set(_SERIALIZED.findall(log))
    entry: str | None = None
    frame = (0, 0, 0)
    for line in log.splitlines():
        if match := _ENTRY.search(line):
            entry, frame = match.group(1), (0, 0, 0)
        elif (match := _FRAME.search(line)) and entry:
            frame = (int(match.group(1)), int(match.group(2)), int(match.group(3)))
        elif (match := _USED.search(line)) and entry:
            found[entry] = KernelResources(int(match.group(1)), *frame, entry in serialized)
            entry = None
    return found


def census(
    package: KernelPackage, format_name: str, variant_names: list[str], artifact_dir: Path
) -> dict[str, dict[str, int | bool]]:
    """Per variant name: registers, stack frame, spill bytes, ``spills``, ``wgmma_serialized`` (NVRTC at the
    backend's options)."""
    from workers.backends import cuda  # imports cuda-python lazily: only where NVRTC is installed

    backend = cuda.CudaBackend(artifact_dir, options=(*cuda.BASE_OPTIONS, PTXAS_VERBOSE))
    variants = [package.parse(name, "cuda") for name in variant_names]
    out: dict[str, dict[str, int | bool]] = {}
    for unit, result in backend.compile(package, format_name, variants):
        if not result.ok:
            raise RuntimeError(f"{package.name} {format_name}: NVRTC failed:\n{result.log[-3000:]}")
        report = parse_ptxas_report(result.log)
        if not report:  # a cubin from the cache comes back without NVRTC's log
            raise RuntimeError(f"{package.name} {format_name}: no ptxas report (a cached cubin?)")
        for name, expression in unit.symbols(package).items():
            lowered = result.symbols.get(expression, expression)
            if lowered not in report:
                raise RuntimeError(f"{package.name} {format_name}: no ptxas report for {name} ({lowered})")
            resources = report[lowered]
            out[name] = {**asdict(resources), "spills": resources.spills}
    return out
