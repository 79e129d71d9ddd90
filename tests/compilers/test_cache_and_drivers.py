"""Compile cache keys, driver failure reporting, the zig lld wrapper and the offload-bundle reader."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kernels.formats.packed import KINDS
from workers.compilers import HipccCompiler, NvccCompiler, ZigClangCompiler, compiler_for_arch
from workers.compilers.base import CompileResult
from workers.compilers.cache import CompileCache, cache_key, source_closure, source_hash
from workers.compilers.codeobject import BUNDLE_MAGIC, unbundle

TINY = """#include "tb_portability.h"
extern "C" __global__ void tb_tiny(float *y) { y[TB_TID] = (float)tb_dot4(0x01010101, 0x02020202, 0); }
"""


@pytest.fixture
def tiny_source(tmp_path: Path) -> Path:
    hip = Path(__file__).resolve().parents[2] / "kernels" / "library" / "include"
    (tmp_path / "tb_portability.h").write_text((hip / "tb_portability.h").read_text())
    src = tmp_path / "tiny.hip"
    src.write_text(TINY)
    return src


class FakeCompiler:
    """Records calls; writes a file named after the defines (the real drivers are tested elsewhere)."""

    name = "fake"
    arches = frozenset({"gfx906"})

    def __init__(self, version: str = "1", fail: bool = False) -> None:
        self.version, self.fail, self.calls = version, fail, 0

    def identity(self) -> str:
        return f"fake {self.version}"

    def flags(self, arch: str) -> tuple[str, ...]:
        return ("-O3",)

    def compile(self, source: Path, arch: str, defines: dict[str, str], out_path: Path) -> CompileResult:
        self.calls += 1
        if self.fail:
            return CompileResult(False, "error: nope", None)
        out_path.write_text(repr(sorted(defines.items())))
        return CompileResult(True, "fine", out_path)


def test_cache_key_covers_headers_kind_arch_and_compiler(tiny_source: Path) -> None:
    header = tiny_source.parent / "tb_portability.h"
    assert set(source_closure(tiny_source)) == {"tiny.hip", "tb_portability.h"}
    fake = FakeCompiler()
    base = cache_key(tiny_source, "decode", "sym", "gfx906", fake, KINDS["sym"].defines)
    assert base == cache_key(tiny_source, "decode", "sym", "gfx906", fake, KINDS["sym"].defines)
    assert base != cache_key(tiny_source, "decode", "asym", "gfx906", fake, KINDS["asym"].defines)
    assert base != cache_key(tiny_source, "decode", "sym", "gfx90a", fake, KINDS["sym"].defines)
    assert base != cache_key(tiny_source, "prefill", "sym", "gfx906", fake, KINDS["sym"].defines)
    assert base != cache_key(tiny_source, "decode", "sym", "gfx906", FakeCompiler("2"), KINDS["sym"].defines)
    before = source_hash(tiny_source)
    header.write_text(header.read_text() + "\n/* a header edit */\n")
    assert source_hash(tiny_source) != before
    assert cache_key(tiny_source, "decode", "sym", "gfx906", fake, KINDS["sym"].defines) != base


def test_cache_hits_and_does_not_keep_failures(tiny_source: Path, tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache")
    fake = FakeCompiler()
    first = cache.get_or_compile(fake, tiny_source, "decode", "asym", "gfx906", KINDS["asym"].defines)
    again = cache.get_or_compile(fake, tiny_source, "decode", "asym", "gfx906", KINDS["asym"].defines)
    assert first.compiled and not again.compiled and fake.calls == 1
    assert first.result.path == again.result.path and again.result.log == "fine"
    assert first.result.path is not None and "TB_ASYMMETRIC" in first.result.path.read_text()
    broken = FakeCompiler(version="broken", fail=True)
    for _ in range(2):
        bad = cache.get_or_compile(broken, tiny_source, "decode", "asym", "gfx906", {})
        assert not bad.result.ok and bad.compiled and "nope" in bad.result.log
    assert broken.calls == 2
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_drivers_refuse_foreign_arches(tiny_source: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.co"
    assert "not sm_90" in HipccCompiler().compile(tiny_source, "sm_90", {}, out).log
    assert "not gfx906" in ZigClangCompiler().compile(tiny_source, "gfx906", {}, out).log
    assert "not gfx942" in NvccCompiler().compile(tiny_source, "gfx942", {}, out).log
    assert isinstance(compiler_for_arch("gfx90a"), HipccCompiler)
    assert isinstance(compiler_for_arch("gfx950"), ZigClangCompiler)
    assert isinstance(compiler_for_arch("sm_90"), NvccCompiler)
    with pytest.raises(KeyError, match="known: gfx906"):
        compiler_for_arch("gfx1100")


def test_missing_tool_is_a_failed_result(tiny_source: Path, tmp_path: Path) -> None:
    result = HipccCompiler(hipcc="definitely-not-hipcc").compile(tiny_source, "gfx906", {}, tmp_path / "x.co")
    assert not result.ok and "not found" in result.log and result.path is None
    nv = NvccCompiler(nvcc="/nonexistent/nvcc").compile(tiny_source, "sm_90", {}, tmp_path / "y.cubin")
    assert not nv.ok and "not found" in nv.log


@pytest.mark.parametrize("arch", ["gfx906", "gfx950", "sm_90"])
def test_compile_error_comes_back_with_the_log(tmp_path: Path, tiny_source: Path, arch: str) -> None:
    compiler = compiler_for_arch(arch)
    if not compiler.identity():
        pytest.skip(f"{compiler.name} not installed")
    broken = tiny_source.with_name("broken.hip")
    broken.write_text(TINY + "this is not C++;\n")
    bad = compiler.compile(broken, arch, {}, tmp_path / "b.co")
    assert not bad.ok and "error" in bad.log and bad.path is None
    good = compiler.compile(tiny_source, arch, {}, tmp_path / "g.co")
    assert good.ok, good.log


def test_zig_wrapper_drops_flavor(tmp_path: Path) -> None:
    zig = ZigClangCompiler(wrapper_dir=tmp_path / "wrap")
    if not zig.identity():
        pytest.skip("ziglang not installed")
    folder = zig.ensure_wrapper()
    import subprocess

    for name in ("ld.lld", "lld"):
        proc = subprocess.run(
            [str(folder / name), "-flavor", "gnu", "--version"], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0 and "LLD" in proc.stdout
    assert zig.ensure_wrapper() == folder  # idempotent


def test_unbundle_reads_clang_offload_bundles() -> None:
    payloads = {"host-x86_64-unknown-linux": b"", "hipv4-amdgcn-amd-amdhsa--gfx906": b"\x7fELF-device"}
    header = BUNDLE_MAGIC + struct.pack("<Q", len(payloads))
    entries = b""
    offset = len(header) + sum(24 + len(t) for t in payloads)
    body = b""
    for triple, blob in payloads.items():
        entries += struct.pack("<QQQ", offset + len(body), len(blob), len(triple)) + triple.encode()
        body += blob
    assert unbundle(header + entries + body) == payloads
    with pytest.raises(ValueError, match="bundle"):
        unbundle(b"\x7fELF")
