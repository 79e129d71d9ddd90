"""Every (family, format kind, variant) compiles for every arch with the real toolchains.

One translation unit per (family, kind, arch) holds every variant of the family, so the
matrix is 2 families x 3 kinds x 5 arches compiles. The default run covers each (family,
arch) once, rotating the kinds so all three are compiled somewhere; the full matrix is slow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernels.families import FAMILIES
from kernels.families.abi import symbol
from kernels.formats.packed import KINDS
from workers.compilers import GPU_ARCHES, compiler_for_arch, family_source
from workers.compilers.cache import CompileCache
from workers.compilers.codeobject import device_elfs, kernel_symbols

ARCH_BACKEND = {"gfx906": "rocm", "gfx90a": "rocm", "gfx942": "rocm", "gfx950": "rocm", "sm_90": "cuda"}
KIND_NAMES = tuple(KINDS)
# (family, arch) -> kind for the fast run: every kind appears for both families
FAST = {
    ("decode", "gfx906"): "asym", ("decode", "gfx90a"): "sym16", ("decode", "gfx942"): "sym",
    ("decode", "gfx950"): "asym", ("decode", "sm_90"): "sym16",
    ("prefill", "gfx906"): "sym", ("prefill", "gfx942"): "asym", ("prefill", "sm_90"): "sym16",
}  # fmt: skip


def _matrix() -> list[Any]:
    cases: list[Any] = []
    for family in ("decode", "prefill"):
        for arch in GPU_ARCHES:
            for kind in KIND_NAMES:
                fast = FAST.get((family, arch)) == kind
                marks = [] if fast else [pytest.mark.slow]
                cases.append(pytest.param(family, arch, kind, marks=marks, id=f"{family}-{arch}-{kind}"))
    return cases


def _require(arch: str) -> None:
    compiler = compiler_for_arch(arch)
    if not compiler.identity():
        pytest.skip(f"{compiler.name} is not installed here")


@pytest.mark.parametrize(("family", "arch", "kind"), _matrix())
def test_family_compiles_with_every_variant_symbol(
    artifact_dir: Path, family: str, arch: str, kind: str
) -> None:
    _require(arch)
    compiler = compiler_for_arch(arch)
    cache = CompileCache(artifact_dir / "gpu")
    got = cache.get_or_compile(compiler, family_source(family), family, kind, arch, KINDS[kind].defines)
    assert got.result.ok, got.result.log[-4000:]
    assert got.result.path is not None
    expected = {symbol(v) for v in FAMILIES[family].space(ARCH_BACKEND[arch])}
    assert len(expected) == (20 if family == "decode" else 40)
    found = kernel_symbols(got.result.path)
    assert expected <= found, sorted(expected - found)
    elfs = device_elfs(got.result.path)
    if arch.startswith("gfx"):
        # hipcc: offload bundle with the device entry for the arch; zig clang: a bare ELF
        assert any(arch in triple for triple in elfs) or list(elfs) == ["elf"]
        assert all(blob[18:20] == b"\xe0\x00" for blob in elfs.values())  # e_machine EM_AMDGPU (224)
    else:
        assert all(blob[18:20] == b"\xbe\x00" for blob in elfs.values())  # e_machine EM_CUDA (190)
