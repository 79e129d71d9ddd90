"""`tunebase isa` survives any real code object: Triton's target strings, arches LLVM cannot disassemble,
and a disassembler that dies; each becomes a per-kernel note, never a dead CLI, request or worker."""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.isa.conftest import TRITON
from workers.isa.analyze import analyze_bytes
from workers.isa.bundle import code_objects
from workers.isa.isolate import disassemble_isolated
from workers.isa.metadata import arch_from_target, read_metadata, resolve_arch

CLI = [sys.executable, "-m", "service.cli"]
E_FLAGS_OFFSET = 48  # ELF64 header: e_ident(16) e_type(2) e_machine(2) e_version(4) e_entry/phoff/shoff(24)


def isa_json(path: Path) -> list[dict[str, Any]]:
    proc = subprocess.run([*CLI, "isa", "--json", str(path)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    result: list[dict[str, Any]] = json.loads(proc.stdout)
    return result


def with_machine(data: bytes, mach: int) -> bytes:
    """The same code object with EF_AMDGPU_MACH (the low byte of e_flags) replaced."""
    (flags,) = struct.unpack_from("<I", data, E_FLAGS_OFFSET)
    patched = bytearray(data)
    struct.pack_into("<I", patched, E_FLAGS_OFFSET, (flags & ~0xFF) | mach)
    return bytes(patched)


@pytest.mark.parametrize(
    ("target", "arch"),
    [
        ("amdgcn-amd-amdhsa--gfx90a:xnack-", "gfx90a"),
        ("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", "gfx942"),
        ("amdgpu9.42-amd-amdhsa-unknown-gfx942", "gfx942"),  # Triton 3.9
        ("amdgpu9.50-amd-amdhsa-unknown-gfx950", "gfx950"),
        ("hipv4-amdgcn-amd-amdhsa--gfx906", "gfx906"),
        ("amdgcn-amd-amdhsa--gfx9-4-generic:xnack-", "gfx9-4-generic"),
        ("gfx1100", "gfx1100"),
        ("amdgcn-amd-amdhsa", ""),
    ],
)
def test_arch_from_any_target_form(target: str, arch: str) -> None:
    assert arch_from_target(target) == arch


def test_the_elf_header_wins_over_the_target_string() -> None:
    assert resolve_arch(0x54F, "amdgpu9.50-amd-amdhsa-unknown-gfx950") == ("gfx950", [])
    arch, warnings = resolve_arch(0x54C, "amdgcn-amd-amdhsa--gfx950")
    assert arch == "gfx942" and "ELF header says gfx942" in warnings[0]
    arch, warnings = resolve_arch(0x0FE, "amdgcn-amd-amdhsa--gfx950")  # unknown machine: the string fills in
    assert arch == "gfx950" and "not a known processor" in warnings[0]


@pytest.mark.parametrize(
    "stem", ["vector_add_gfx942", "vector_add_gfx950", "matmul_f16_gfx942", "matmul_f16_gfx950"]
)
def test_triton_objects_are_read_and_disassembled(stem: str) -> None:
    path = TRITON / f"{stem}.hsaco"
    assert read_metadata(path.read_bytes()).target.startswith("amdgpu9.")  # the form that used to abort
    (report,) = isa_json(path)
    assert report["arch"] == stem.rsplit("_", 1)[1]
    assert report["disassembler"] == "llvm22" and report["disassembly_error"] is None
    census = report["census"]
    assert isinstance(census, dict) and census["kernel"]["total"] > 50
    assert report["liveness"] is not None


def test_an_arch_llvm_cannot_disassemble_is_a_per_kernel_error(tmp_path: Path) -> None:
    """gfx12-5-generic (EF_AMDGPU_MACH 0x5b) is named by the header but unknown to LLVM 22's disassembler:
    LLVM exits with 'LLVM ERROR: disassembly not yet supported for subtarget' in the child, not here."""
    path = tmp_path / "generic.hsaco"
    path.write_bytes(with_machine((TRITON / "vector_add_gfx950.hsaco").read_bytes(), 0x5B))
    (report,) = isa_json(path)
    assert report["arch"] == "gfx12-5-generic" and report["vgpr"] == 5  # the metadata is still read
    assert any("names gfx950 but the ELF header says gfx12-5-generic" in d for d in report["diagnosis"])
    error = str(report["disassembly_error"])
    assert "LLVM disassembler died" in error and "not yet supported for subtarget" in error
    assert report["census"] is None and report["liveness"] is None
    (in_process,) = analyze_bytes(path.read_bytes())  # and this test process is still alive
    assert in_process["disassembly_error"] == error
    table = subprocess.run([*CLI, "isa", str(path)], capture_output=True, text=True, timeout=180)
    assert table.returncode == 0 and "no disassembly: LLVM disassembler died" in table.stdout


def _crashing_python(tmp_path: Path, crash_unless: str) -> str:
    """A python that SIGABRTs the isolate child unless it was asked for kernel ``crash_unless`` alone."""
    script = tmp_path / "python"
    script.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" --function {crash_unless} "*) exec {sys.executable} "$@";; esac\n'
        "kill -ABRT $$\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_a_crash_costs_only_its_own_kernel(code_object: Callable[[str, str], Path], tmp_path: Path) -> None:
    data = code_objects(code_object("dot4_loop", "gfx950").read_bytes())[0].data
    python = _crashing_python(tmp_path, "tb_dot4_loop")
    result = disassemble_isolated(data, "gfx950", python=python)
    assert set(result.functions) == {"tb_dot4_loop"} and result.error is None
    assert "signal 6" in result.kernel_errors["tb_lds_heavy"]
    assert result.error_for("tb_lds_heavy") == result.kernel_errors["tb_lds_heavy"]


def test_a_hung_disassembler_is_stopped(code_object: Callable[[str, str], Path], tmp_path: Path) -> None:
    data = code_objects(code_object("dot4_loop", "gfx950").read_bytes())[0].data
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    result = disassemble_isolated(data, "gfx950", timeout_s=1, python=str(script))
    assert result.functions == {} and "ran past 1 s" in str(result.error)
    assert result.error_for("tb_dot4_loop") == result.error


def test_objdump_engine_is_unchanged_for_gfx906(code_object: Callable[[str, str], Path]) -> None:
    if not os.path.exists("/usr/bin/llvm-objdump-15"):
        pytest.skip("llvm-objdump-15 not installed (Debian package llvm-15)")
    data = code_objects(code_object("dot4_loop", "gfx906").read_bytes())[0].data
    result = disassemble_isolated(data, "gfx906")
    assert result.engine == "objdump" and set(result.functions) == {"tb_dot4_loop", "tb_lds_heavy"}


def test_the_api_and_worker_paths_survive_the_same_abort(tmp_path: Path) -> None:
    """The pre-screen (API) and the ROCm backend (worker) read code objects through the same isolation."""
    from workers.backends.rocm import isa_resources
    from workers.prescreen import _read_code_object

    data = with_machine((TRITON / "vector_add_gfx950.hsaco").read_bytes(), 0x5B)
    entry = _read_code_object(data, "gfx950")["vector_add"]
    assert entry["functions"] == {} and "not yet supported for subtarget" in entry["disassembly_error"]
    path = tmp_path / "vector_add.hsaco"
    path.write_bytes(data)
    (report,) = isa_resources(path).values()
    assert report["census"] is None and "LLVM disassembler died" in report["disassembly_error"]
