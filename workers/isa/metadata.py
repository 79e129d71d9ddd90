"""Kernel resources from the AMDGPU metadata note (NT_AMDGPU_METADATA, msgpack) of a code object.

Reading the note with pyelftools + msgpack gives the compiler's own figures (the same that
``llvm-readelf --notes`` prints) without parsing any tool's text output.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import msgpack
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection

from workers.isa.bundle import NotACodeObject

NT_AMDGPU_METADATA = 32
EF_AMDGPU_MACH = 0x0FF

# EF_AMDGPU_MACH_AMDGCN_* values from the LLVM AMDGPU ELF ABI (AMDGPUUsage, "ELF Header").
MACH_TO_ARCH: dict[int, str] = {
    0x02C: "gfx900",
    0x02F: "gfx906",
    0x030: "gfx908",
    0x032: "gfx90c",
    0x03F: "gfx90a",
    0x040: "gfx940",
    0x04B: "gfx941",
    0x04C: "gfx942",
    0x04F: "gfx950",
    0x033: "gfx1010",
    0x036: "gfx1030",
    0x041: "gfx1100",
    0x04E: "gfx1200",
}


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
    arch: str  # e.g. gfx906 (target features such as :xnack- stripped)
    target: str  # amdhsa.target when present, e.g. amdgcn-amd-amdhsa--gfx90a:xnack-
    kernels: list[KernelMeta]


def arch_from_flags(e_flags: int) -> str:
    """The processor named by e_flags' EF_AMDGPU_MACH field ('' when unknown)."""
    return MACH_TO_ARCH.get(e_flags & EF_AMDGPU_MACH, "")


def arch_from_target(target: str) -> str:
    """``amdgcn-amd-amdhsa--gfx90a:xnack-`` → ``gfx90a``."""
    tail = target.split("--", 1)[1] if "--" in target else target
    return tail.split(":", 1)[0]


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
    arch = arch_from_target(target) if target else arch_from_flags(e_flags)
    if not arch:
        arch = arch_from_flags(e_flags)
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
    return CodeObjectMeta(arch=arch, target=target, kernels=kernels)
