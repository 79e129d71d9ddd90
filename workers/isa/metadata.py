"""Kernel resources from the AMDGPU metadata note (NT_AMDGPU_METADATA, msgpack) of a code object.

Reading the note with pyelftools + msgpack gives the compiler's own figures (the same that
``llvm-readelf --notes`` prints) without parsing any tool's text output.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import Any

import msgpack
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection

from workers.isa.bundle import NotACodeObject

NT_AMDGPU_METADATA = 32
EF_AMDGPU_MACH = 0x0FF

# EF_AMDGPU_MACH_AMDGCN_* values from the LLVM AMDGPU ELF ABI (AMDGPUUsage, "ELF Header"): the processor
# the code was generated for, whatever the metadata's target string says.
MACH_TO_ARCH: dict[int, str] = {
    0x02C: "gfx900",
    0x02D: "gfx902",
    0x02E: "gfx904",
    0x02F: "gfx906",
    0x030: "gfx908",
    0x031: "gfx909",
    0x032: "gfx90c",
    0x033: "gfx1010",
    0x034: "gfx1011",
    0x035: "gfx1012",
    0x036: "gfx1030",
    0x037: "gfx1031",
    0x038: "gfx1032",
    0x039: "gfx1033",
    0x03D: "gfx1035",
    0x03E: "gfx1034",
    0x03F: "gfx90a",
    0x040: "gfx940",
    0x041: "gfx1100",
    0x042: "gfx1013",
    0x043: "gfx1150",
    0x044: "gfx1103",
    0x045: "gfx1036",
    0x046: "gfx1101",
    0x047: "gfx1102",
    0x048: "gfx1200",
    0x049: "gfx1250",
    0x04A: "gfx1151",
    0x04B: "gfx941",
    0x04C: "gfx942",
    0x04E: "gfx1201",
    0x04F: "gfx950",
    0x051: "gfx9-generic",
    0x052: "gfx10-1-generic",
    0x053: "gfx10-3-generic",
    0x054: "gfx11-generic",
    0x055: "gfx1152",
    0x058: "gfx1153",
    0x059: "gfx12-generic",
    0x05A: "gfx1251",
    0x05B: "gfx12-5-generic",
    0x05F: "gfx9-4-generic",
}
KNOWN_ARCHS = frozenset(MACH_TO_ARCH.values())
# a processor name anywhere in a target string: amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-,
# amdgpu9.42-amd-amdhsa-unknown-gfx942 (Triton 3.9), hipv4-amdgcn-amd-amdhsa--gfx90a, gfx9-4-generic
_ARCH_IN_TARGET = re.compile(r"(?<![0-9a-z])(gfx(?:\d+(?:-\d+)*-generic|[0-9a-f]{3,4}))(?![0-9a-z])")


@dataclass(frozen=True)
class KernelMeta:
    """Per-kernel figures of the metadata note (names follow the note's keys without the dot)."""

    name: str
    symbol: str
    vgpr_count: int
    agpr_count: int
    sgpr_count: int
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    vgpr_spill_count: int
    sgpr_spill_count: int
    wavefront_size: int
    max_flat_workgroup_size: int
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class CodeObjectMeta:
    arch: str  # e.g. gfx906 (target features such as :xnack- stripped); from the ELF header when it names one
    target: str  # amdhsa.target when present, e.g. amdgcn-amd-amdhsa--gfx90a:xnack-
    kernels: list[KernelMeta]
    warnings: list[str] = field(default_factory=list)  # e.g. the target string disagrees with the header


# AGPRs share one 512-entry file with the arch VGPRs; the note's .vgpr_count is then the total
# (align(arch VGPRs, 4) + AGPRs, what occupancy is computed from), not the arch VGPRs alone.
UNIFIED_AGPR_ARCHS = frozenset({"gfx90a", "gfx940", "gfx941", "gfx942", "gfx950", "gfx9-4-generic"})


def arch_vgpr_count(arch: str, kernel: KernelMeta) -> int:
    """Arch VGPRs a kernel may use: ``.vgpr_count`` less the AGPRs where the note counts both.

    Checked on Triton and clang objects for gfx942/gfx950: ``.vgpr_count`` 378 with ``.agpr_count`` 122
    and the kernel descriptor's ACCUM_OFFSET 256 (AGPRs start after 256 arch VGPRs).
    """
    if arch in UNIFIED_AGPR_ARCHS and kernel.agpr_count > 0:
        return max(0, kernel.vgpr_count - kernel.agpr_count)
    return kernel.vgpr_count


def arch_from_flags(e_flags: int) -> str:
    """The processor named by e_flags' EF_AMDGPU_MACH field ('' when unknown)."""
    return MACH_TO_ARCH.get(e_flags & EF_AMDGPU_MACH, "")


def arch_from_target(target: str) -> str:
    """The processor inside any target-string form ('' when it names none).

    ``amdgcn-amd-amdhsa--gfx90a:xnack-`` → ``gfx90a``; ``amdgpu9.42-amd-amdhsa-unknown-gfx942`` → ``gfx942``.
    """
    found = _ARCH_IN_TARGET.findall(target)
    return found[-1] if found else ""


def resolve_arch(e_flags: int, target: str) -> tuple[str, list[str]]:
    """(arch, warnings): the ELF header's machine wins; the target string only fills in when it is unknown."""
    by_flags = arch_from_flags(e_flags)
    by_target = arch_from_target(target) if target else ""
    warnings: list[str] = []
    if by_flags and by_target and by_flags != by_target:
        warnings.append(
            f"metadata target {target!r} names {by_target} but the ELF header says {by_flags}; "
            f"using {by_flags}"
        )
    if by_flags:
        return by_flags, warnings
    if by_target:
        warnings.append(
            f"ELF header machine 0x{e_flags & EF_AMDGPU_MACH:03x} is not a known processor; "
            f"using {by_target} from the target string"
        )
        return by_target, warnings
    warnings.append(
        f"unknown processor: ELF header machine 0x{e_flags & EF_AMDGPU_MACH:03x}, target {target!r}"
    )
    return "", warnings


def _int(entry: dict[str, Any], key: str) -> int:
    value = entry.get(key, 0)
    return int(value) if isinstance(value, int | float) else 0


def _decode(value: Any) -> Any:
    """msgpack may hand back bytes for str in old encodings; normalise keys and strings."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {_decode(k): _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def metadata_note(elf: ELFFile) -> dict[str, Any]:
    """The decoded NT_AMDGPU_METADATA map; raises NotACodeObject when the note is absent."""
    for section in elf.iter_sections():
        if not isinstance(section, NoteSection):
            continue
        for note in section.iter_notes():
            if note["n_name"] == "AMDGPU" and note["n_type"] in (NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA"):
                try:
                    decoded = msgpack.unpackb(bytes(note["n_descdata"]), raw=False, strict_map_key=False)
                except (ValueError, msgpack.UnpackException) as exc:
                    raise NotACodeObject(f"AMDGPU metadata note is not valid msgpack: {exc}") from None
                if not isinstance(decoded, dict):
                    raise NotACodeObject("AMDGPU metadata note is not a map")
                return dict(_decode(decoded))
    raise NotACodeObject("no NT_AMDGPU_METADATA note (code object v2 or not a kernel object)")


def read_metadata(data: bytes) -> CodeObjectMeta:
    """Kernels and arch of one AMDGPU ELF code object."""
    try:
        elf = ELFFile(io.BytesIO(data))
        e_flags = int(elf.header["e_flags"])
        note = metadata_note(elf)
    except ELFError as exc:
        raise NotACodeObject(f"damaged ELF: {exc}") from None
    target = str(note.get("amdhsa.target", ""))
    arch, warnings = resolve_arch(e_flags, target)
    kernels = []
    for entry in note.get("amdhsa.kernels", []) or []:
        if not isinstance(entry, dict):
            continue
        kernels.append(
            KernelMeta(
                name=str(entry.get(".name", "")),
                symbol=str(entry.get(".symbol", "")),
                vgpr_count=_int(entry, ".vgpr_count"),
                agpr_count=_int(entry, ".agpr_count"),
                sgpr_count=_int(entry, ".sgpr_count"),
                group_segment_fixed_size=_int(entry, ".group_segment_fixed_size"),
                private_segment_fixed_size=_int(entry, ".private_segment_fixed_size"),
                vgpr_spill_count=_int(entry, ".vgpr_spill_count"),
                sgpr_spill_count=_int(entry, ".sgpr_spill_count"),
                wavefront_size=_int(entry, ".wavefront_size") or 64,
                max_flat_workgroup_size=_int(entry, ".max_flat_workgroup_size") or 1024,
                raw=entry,
            )
        )
    return CodeObjectMeta(arch=arch, target=target, kernels=kernels, warnings=warnings)
