"""Disassemble the kernels of an AMDGPU code object into (address, mnemonic, operands) rows.

Two engines, one output: Debian's ``llvm-objdump-15`` knows gfx906/gfx90a but not gfx942/gfx950, so
for those the LLVM 22 inside the ``rocm-llvm-python`` wheel is driven through LLVM's C disassembler
API (LLVMCreateDisasmCPU / LLVMDisasmInstruction). Function extents come from the ELF symbol table,
so the s_nop padding between kernels is not counted.
"""

from __future__ import annotations

import ctypes
import io
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

OBJDUMP = "llvm-objdump-15"
OBJDUMP_ARCHS = frozenset({"gfx900", "gfx906", "gfx908", "gfx90a", "gfx90c", "gfx1030"})
OBJDUMP_TIMEOUT_S = 120
TRIPLE = b"amdgcn-amd-amdhsa"

_OBJDUMP_LINE = re.compile(r"^\s+(?P<text>\S.*?)\s*//\s*(?P<addr>[0-9A-Fa-f]+):")


@dataclass(frozen=True)
class Instruction:
    address: int
    mnemonic: str
    operands: str

    @property
    def text(self) -> str:
        return f"{self.mnemonic} {self.operands}".strip()


@dataclass(frozen=True)
class Function:
    name: str
    address: int
    size: int
    instructions: list[Instruction]


class DisassemblyUnavailable(RuntimeError):
    """No engine can disassemble this arch here (tool or wheel missing)."""


def function_symbols(data: bytes) -> list[tuple[str, int, int]]:
    """(name, address, size) of every STT_FUNC symbol with a size, by address."""
    elf = ELFFile(io.BytesIO(data))
    found: dict[int, tuple[str, int, int]] = {}
    for section in elf.iter_sections():
        if not isinstance(section, SymbolTableSection):
            continue
        for sym in section.iter_symbols():
            if sym["st_info"]["type"] == "STT_FUNC" and sym["st_size"] > 0:
                found.setdefault(int(sym["st_value"]), (sym.name, int(sym["st_value"]), int(sym["st_size"])))
    return [found[a] for a in sorted(found)]


def _split(text: str) -> tuple[str, str]:
    parts = text.strip().split(None, 1)
    return (parts[0], parts[1].strip() if len(parts) > 1 else "") if parts else ("", "")


def _group(symbols: list[tuple[str, int, int]], rows: list[Instruction]) -> list[Function]:
    functions = []
    for name, start, size in symbols:
        inside = [row for row in rows if start <= row.address < start + size]
        functions.append(Function(name, start, size, inside))
    return functions


def parse_objdump(output: str) -> list[Instruction]:
    """Rows of ``llvm-objdump --disassemble`` output (the hex address is in the trailing comment)."""
    rows = []
    for line in output.splitlines():
        match = _OBJDUMP_LINE.match(line)
        if match:
            mnemonic, operands = _split(match.group("text"))
            rows.append(Instruction(int(match.group("addr"), 16), mnemonic, operands))
    return rows


def disassemble_objdump(data: bytes, arch: str, objdump: str = OBJDUMP) -> list[Function]:
    exe = shutil.which(objdump)
    if exe is None:
        raise DisassemblyUnavailable(f"{objdump} not found (Debian package llvm-15)")
    fd, path = tempfile.mkstemp(suffix=".co")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        proc = subprocess.run(
            [exe, "--disassemble", f"--mcpu={arch}", path],
            capture_output=True,
            text=True,
            timeout=OBJDUMP_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DisassemblyUnavailable(f"{objdump} ran past {OBJDUMP_TIMEOUT_S} s") from None
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise DisassemblyUnavailable(f"{objdump} failed: {proc.stderr.strip()[:500]}")
    return _group(function_symbols(data), parse_objdump(proc.stdout))


@lru_cache(maxsize=1)
def _llvm_disassembler_module() -> object:
    """rocm.llvm.c.disassembler with the AMDGPU target registered (once per process)."""
    try:
        from rocm.llvm.c import disassembler, target
    except ImportError as exc:
        raise DisassemblyUnavailable(f"rocm-llvm-python is not installed: {exc}") from None
    target.LLVMInitializeAllTargetInfos()
    target.LLVMInitializeAllTargetMCs()
    target.LLVMInitializeAllDisassemblers()
    return disassembler


def _text_bytes(data: bytes) -> tuple[int, bytes]:
    """(virtual address, bytes) of the .text section."""
    elf = ELFFile(io.BytesIO(data))
    text = elf.get_section_by_name(".text")
    if text is None:
        raise DisassemblyUnavailable("code object has no .text section")
    return int(text["sh_addr"]), bytes(text.data())


def disassemble_llvm(data: bytes, arch: str, only: str | None = None) -> list[Function]:
    """Through LLVM 22's C API in rocm-llvm-python: works for every arch LLVM 22 knows.

    LLVM aborts the process on a CPU it cannot disassemble for, so call this through
    ``workers.isa.isolate`` (a child process), never directly in a long-lived process.
    ``only`` restricts the work to one function (the isolation retries one kernel at a time).
    """
    dis = _llvm_disassembler_module()
    ctx = dis.LLVMCreateDisasmCPU(TRIPLE, arch.encode(), None, 0, None, None)  # type: ignore[attr-defined]
    if ctx is None:
        raise DisassemblyUnavailable(f"LLVM has no disassembler for {arch}")
    try:
        base, text = _text_bytes(data)
        code = ctypes.create_string_buffer(text, len(text))
        code_addr = ctypes.addressof(code)
        out = bytearray(512)
        rows: list[Instruction] = []
        symbols = [sym for sym in function_symbols(data) if only is None or sym[0] == only]
        for _name, start, size in symbols:
            pc = start
            while pc < start + size:
                offset = pc - base
                if offset < 0 or offset >= len(text):
                    break
                length = dis.LLVMDisasmInstruction(  # type: ignore[attr-defined]
                    ctx, code_addr + offset, len(text) - offset, pc, out, len(out)
                )
                if length == 0:  # undecodable word: record it and move on by one dword
                    rows.append(
                        Instruction(
                            pc, ".long", f"0x{int.from_bytes(text[offset : offset + 4], 'little'):08x}"
                        )
                    )
                    pc += 4
                    continue
                mnemonic, operands = _split(bytes(out).split(b"\0", 1)[0].decode("ascii", errors="replace"))
                rows.append(Instruction(pc, mnemonic, operands))
                pc += int(length)
    finally:
        dis.LLVMDisasmDispose(ctx)  # type: ignore[attr-defined]
    return _group(symbols, rows)


def engine_for(arch: str) -> str:
    """'objdump' for archs Debian's LLVM 15 knows (when installed), else 'llvm22'."""
    if arch in OBJDUMP_ARCHS and shutil.which(OBJDUMP):
        return "objdump"
    return "llvm22"


def disassemble(data: bytes, arch: str, engine: str | None = None) -> list[Function]:
    """Kernels of one ELF code object as functions with their instructions."""
    chosen = engine or engine_for(arch)
    if chosen == "objdump":
        return disassemble_objdump(data, arch)
    return disassemble_llvm(data, arch)
