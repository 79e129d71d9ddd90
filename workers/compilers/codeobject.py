"""Just enough of the code-object containers to list the kernels a compile produced.

hipcc ``--genco`` writes a clang offload bundle (``__CLANG_OFFLOAD_BUNDLE__``: entry count,
then (offset, size, triple) per entry); zig clang writes a bare AMDGPU ELF; nvcc ``-cubin``
a CUDA ELF. Kernels are the defined function symbols of the device ELF.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def unbundle(data: bytes) -> dict[str, bytes]:
    """Offload-bundle entries by target triple (e.g. ``hipv4-amdgcn-amd-amdhsa--gfx906``)."""
    if not data.startswith(BUNDLE_MAGIC):
        raise ValueError("not a clang offload bundle")
    pos = len(BUNDLE_MAGIC)
    (count,) = struct.unpack_from("<Q", data, pos)
    pos += 8
    entries: dict[str, bytes] = {}
    for _ in range(count):
        offset, size, triple_len = struct.unpack_from("<QQQ", data, pos)
        pos += 24
        triple = data[pos : pos + triple_len].decode()
        pos += triple_len
        entries[triple] = data[offset : offset + size]
    return entries


def device_elfs(path: Path) -> dict[str, bytes]:
    """Device ELF images in a code object file: bundle entries with an ELF payload, or the file itself."""
    data = Path(path).read_bytes()
    if data.startswith(BUNDLE_MAGIC):
        return {t: blob for t, blob in unbundle(data).items() if blob.startswith(b"\x7fELF")}
    if data.startswith(b"\x7fELF"):
        return {"elf": data}
    raise ValueError(f"{path}: neither an ELF nor a clang offload bundle")


def function_symbols(elf: bytes) -> set[str]:
    """Defined STT_FUNC symbols of one ELF image (AMDGPU kernels; CUDA entry points)."""
    names: set[str] = set()
    f = ELFFile(io.BytesIO(elf))
    for section in f.iter_sections():
        if not isinstance(section, SymbolTableSection):
            continue
        for sym in section.iter_symbols():
            if sym["st_info"]["type"] == "STT_FUNC" and sym["st_shndx"] != "SHN_UNDEF" and sym.name:
                names.add(sym.name)
    return names


def kernel_symbols(path: Path) -> set[str]:
    """Every kernel symbol in a code object (union over bundle entries)."""
    out: set[str] = set()
    for elf in device_elfs(path).values():
        out |= function_symbols(elf)
    return out
