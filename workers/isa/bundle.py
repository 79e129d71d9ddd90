"""Split a clang offload bundle into its device code objects (or accept a bare AMDGPU ELF).

``hipcc --genco`` writes an uncompressed bundle: the 24-byte magic ``__CLANG_OFFLOAD_BUNDLE__``, a
little-endian u64 entry count, then per entry u64 offset, u64 size, u64 id length and the id
(``hipv4-amdgcn-amd-amdhsa--gfx906``, ``host-x86_64-unknown-linux``). The format is small enough to
read directly, which keeps analysis free of ROCm tools. Compressed bundles (``CCOB``) are recognised
and refused with a clear message: they need the bundler's own hash and zstd framing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_MAGIC = b"CCOB"
ELF_MAGIC = b"\x7fELF"
EM_AMDGPU = 224


class NotACodeObject(ValueError):
    """The bytes are neither an AMDGPU ELF code object nor an offload bundle holding one."""


@dataclass(frozen=True)
class CodeObject:
    """One device ELF with the bundle id it came from ('' for a bare ELF)."""

    bundle_id: str
    data: bytes

    @property
    def target(self) -> str:
        """The target part of the id, e.g. ``gfx90a:xnack-`` ('' for a bare ELF)."""
        return self.bundle_id.split("--", 1)[1] if "--" in self.bundle_id else ""


def _is_amdgpu_elf(data: bytes) -> bool:
    if len(data) < 20 or not data.startswith(ELF_MAGIC):
        return False
    endian = "<" if data[5] == 1 else ">"
    (machine,) = struct.unpack_from(endian + "H", data, 18)
    return bool(machine == EM_AMDGPU)


def parse_bundle(data: bytes) -> list[tuple[str, bytes]]:
    """All entries of an uncompressed offload bundle as (id, bytes); raises NotACodeObject if damaged."""
    if not data.startswith(BUNDLE_MAGIC):
        raise NotACodeObject("not a clang offload bundle (magic missing)")
    pos = len(BUNDLE_MAGIC)
    try:
        (count,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        if count > 4096:
            raise NotACodeObject(f"offload bundle claims {count} entries; damaged header")
        entries: list[tuple[str, bytes]] = []
        for index in range(count):
            offset, size, id_len = struct.unpack_from("<QQQ", data, pos)
            pos += 24
            if id_len > 4096 or pos + id_len > len(data):
                raise NotACodeObject(f"offload bundle entry {index}: id runs past the end of the file")
            bundle_id = data[pos : pos + id_len].decode("ascii", errors="replace")
            pos += id_len
            if offset + size > len(data):
                raise NotACodeObject(
                    f"offload bundle entry {index} ({bundle_id}) runs past the end of the file"
                )
            entries.append((bundle_id, data[offset : offset + size]))
    except struct.error as exc:
        raise NotACodeObject(f"offload bundle header truncated: {exc}") from None
    return entries


def code_objects(data: bytes) -> list[CodeObject]:
    """The AMDGPU code objects inside ``data`` (a bundle, or a bare ELF as a single entry)."""
    if data.startswith(COMPRESSED_MAGIC):
        raise NotACodeObject(
            "compressed offload bundle (CCOB); unbundle it first with "
            "`clang-offload-bundler --unbundle --type=o --targets=... --input=F --output=F.co`"
        )
    if data.startswith(BUNDLE_MAGIC):
        objects = [
            CodeObject(bundle_id, blob)
            for bundle_id, blob in parse_bundle(data)
            if "amdgcn" in bundle_id and _is_amdgpu_elf(blob)
        ]
        if not objects:
            raise NotACodeObject("offload bundle holds no AMDGPU code object")
        return objects
    if _is_amdgpu_elf(data):
        return [CodeObject("", data)]
    if data.startswith(ELF_MAGIC):
        raise NotACodeObject("ELF file but not an AMDGPU code object (e_machine is not EM_AMDGPU)")
    raise NotACodeObject("neither an AMDGPU ELF code object nor a clang offload bundle")
