"""Every (family, format, variant) compiles for every arch with the real toolchains.

One translation unit per (family, format or kind, arch) holds every variant of the family: decode reads
tb-split (one unit per format, 9 formats), prefill tb-packed (one unit per kind, 3 kinds), 5 arches. The
default run covers each (family, arch) once, rotating formats / kinds; the full matrix is slow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernels.arches import get_arch, gpu_arches
from kernels.packages.build import compile_units
from kernels.packages.loader import BUILTIN_FOR_PHASE, builtin_packages
from workers.compilers import compiler_for_arch
from workers.compilers.cache import CompileCache
from workers.compilers.codeobject import device_elfs, kernel_symbols

KIND_FORMAT = {"sym": "Q8_0", "asym": "Q4_K", "sym16": "Q6_K"}  # prefill: one format of each kernel kind
DECODE_FORMATS = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q4_K", "Q6_K", "IQ4_XS")
# (family, arch) -> format (decode) or kind (prefill) for the fast run; the unpack paths differ most
# between the K-quants, the IQ4 codebook and the Q5 high bits
FAST = {
    ("decode", "gfx906"): "Q4_K", ("decode", "gfx90a"): "Q6_K", ("decode", "gfx942"): "IQ4_XS",
    ("decode", "gfx950"): "Q5_1", ("decode", "sm_90"): "IQ4_NL",
    ("prefill", "gfx906"): "sym", ("prefill", "gfx942"): "asym", ("prefill", "sm_90"): "sym16",
}  # fmt: skip


def _matrix() -> list[Any]:
    cases: list[Any] = []
    for family in ("decode", "prefill"):
        for arch in gpu_arches():
            for kind in DECODE_FORMATS if family == "decode" else tuple(KIND_FORMAT):
                fast = FAST.get((family, arch)) == kind
                marks = [] if fast else [pytest.mark.slow]
                cases.append(pytest.param(family, arch, kind, marks=marks, id=f"{family}-{arch}-{kind}"))
    return cases


def prefill_sample(backend: str) -> list[Any]:
    """One variant of tb-prefill per (n_tile, m_tile, warp layout), plus every kb / stages / split-K value:
    the whole space (242 variants on cuda) is one compile per format on the GPU host, too slow for CI."""
    package = builtin_packages()["tb-prefill"]
    seen: set[tuple[int, ...]] = set()
    axes: set[tuple[str, int]] = set()
    out = []
    for v in package.space(backend):
        p = v.params
        shape = (p["n_tile"], p["m_tile"], p["warps_n"], p["warps_m"])
        new_axis = {("kb", p["kb"]), ("stages", p["stages"]), ("split_k", p["split_k"])} - axes
        if shape not in seen or new_axis:
            seen.add(shape)
            axes |= new_axis
            out.append(v)
    return out


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
    package = builtin_packages()[BUILTIN_FOR_PHASE[family]]
    backend = get_arch(arch).backend
    fmt = kind if family == "decode" else KIND_FORMAT[kind]
    variants = package.space(backend) if family == "decode" else prefill_sample(backend)
    (unit,) = compile_units(package, fmt, backend, variants)
    got = cache.get_or_compile(compiler, unit.source, package.name, kind, arch, unit.defines)
    assert got.result.ok, got.result.log[-4000:]
    assert got.result.path is not None
    expected = set(unit.symbols(package).values())
    # decode: 68 register kernels on every backend, + 36 cp.async ring kernels (PP 2, 3), 45 int8 tensor-core
    # kernels (RG16; 4 MX4 split-K ones from k3j, 17 with K phases: PP 10-12), 8 stream kernels (PP 5),
    # 4 flat kernels (PP 6, k3m), 7 interleaved ring kernels (PP 7, 8, k3i) and 6 stream kernels with split
    # waits (PP 9, k3q) on CUDA; + 35 reading x quantised once per launch (PP 13-17: 16 RG16, 19 stream)
    assert len(expected) == ((217 if backend == "cuda" else 68) if family == "decode" else len(variants))
    if family == "prefill":  # and every split-K's prelaunch kernel
        expected |= {f"tb_prefill_prep_sk{sk}" for sk in (1, 2, 4)}
    expected |= set(unit.prelaunch_symbols(package, backend).values())  # decode CUDA: tb_decode_prep_rg*
    found = kernel_symbols(got.result.path)
    assert expected <= found, sorted(expected - found)
    elfs = device_elfs(got.result.path)
    if arch.startswith("gfx"):
        # hipcc: offload bundle with the device entry for the arch; zig clang: a bare ELF
        assert any(arch in triple for triple in elfs) or list(elfs) == ["elf"]
        assert all(blob[18:20] == b"\xe0\x00" for blob in elfs.values())  # e_machine EM_AMDGPU (224)
    else:
        assert all(blob[18:20] == b"\xbe\x00" for blob in elfs.values())  # e_machine EM_CUDA (190)
