"""The example package docs/examples/rowsplit-gemv: manifest, host C against gguf, GPU builds.

Real compilers only: cc for every valid host variant (checked numerically on real GGUF Q8_0/Q4_0 blocks
made by the gguf package); hipcc for gfx906, the ziglang clang driver for gfx950 and nvcc for sm_90.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

from kernels.arches import get_arch
from kernels.formats.registry import get_format
from kernels.packages.build import compile_units
from kernels.packages.loader import builtin_packages, load_folder
from kernels.packages.package import DeviceFacts, KernelPackage
from workers.compilers import compiler_for_arch
from workers.compilers.codeobject import device_elfs, kernel_symbols
from workers.isa.analyze import analyze_file

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "rowsplit-gemv"
FORMATS = ("Q8_0", "Q4_0")
HOST_CC = ["cc", "-O3", "-std=c11", "-fPIC", "-shared"]


@pytest.fixture(scope="module")
def package() -> KernelPackage:
    return load_folder(EXAMPLE)


def test_manifest_space_and_rules(package: KernelPackage) -> None:
    assert package.name == "rowsplit-gemv" and package.phase == "decode"
    assert package.name not in builtin_packages()  # an example under docs/, not a library kernel
    assert package.manifest.weights == "gguf"
    names = [v.name for v in package.space("host")]
    assert len(names) == 11 and "R4/U2" in names
    # the parameter-only rule removes the point, naming the rule
    assert package.invalid_points("host") == [{"point": "R8/U4", "rule": "ROWS * UNROLL <= 16"}]
    with pytest.raises(ValueError, match="ROWS \\* UNROLL <= 16"):
        package.parse("R8/U4", "host")
    # the problem rules are checked per point
    fmt = get_format("Q4_0")
    device = DeviceFacts("rocm", "gfx950", get_arch("gfx950").cus, 64)
    variant = package.parse("R8/U1", "rocm")
    assert package.point_problems(package.bindings(variant, 4096, 4096, 1, fmt, device)) == []
    assert package.point_problems(package.bindings(variant, 4, 4096, 1, fmt, device)) == ["n >= ROWS"]
    assert package.point_problems(package.bindings(variant, 4096, 48, 1, fmt, device)) == [
        "k % block_weights == 0"
    ]
    # launch geometry: one wave per row, ROWS rows per workgroup
    geometry = package.geometry(package.bindings(variant, 1000, 4096, 1, fmt, device))
    assert geometry.block == (512, 1, 1) and geometry.grid == (125, 1, 1)
    described = package.describe()
    assert described["table"] == {"struct": "RowsplitGemvConfig", "fields": ["ROWS", "UNROLL"]}
    assert described["backends"] == ["cuda", "host", "rocm"]
    assert all(p["meaning"] for p in described["params"])
    assert package.manifest.parity.rel_l2_max == 1e-4


def _gguf_problem(fmt: str, m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(GGUF blocks uint8 [n][row_bytes], x [m][k], the FP32 reference y [m][n])."""
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((n, k)).astype(np.float32)
    qtype = GGMLQuantizationType[fmt]
    blocks = quants.quantize(weights, qtype)
    x = rng.standard_normal((m, k)).astype(np.float32)
    reference = x @ quants.dequantize(blocks, qtype).astype(np.float32).T
    return np.ascontiguousarray(blocks), x, reference


@pytest.mark.parametrize("fmt", FORMATS)
def test_host_variants_match_gguf_dequantization(package: KernelPackage, fmt: str, tmp_path: Path) -> None:
    """Every valid host variant, compiled with cc from the package's defines, against gguf's reference."""
    units = compile_units(package, fmt, "host", package.space("host"))
    assert len(units) == 11
    # tails everywhere: 37 rows (not a multiple of ROWS), 7 K-blocks (not of UNROLL), M = 5 (past one chunk)
    cases = [_gguf_problem(fmt, m, n, k, seed) for seed, (m, n, k) in enumerate([(5, 37, 224), (1, 64, 512)])]
    for unit in units:
        (variant,) = unit.variants
        library = tmp_path / f"{variant.name.replace('/', '_')}.so"
        defines = [f"-D{key}={value}" for key, value in sorted(unit.defines.items())]
        build = subprocess.run(
            [*HOST_CC, *defines, str(unit.source), "-o", str(library)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert build.returncode == 0, build.stderr
        kernel = ctypes.CDLL(str(library))[package.symbol(variant)]
        kernel.restype = None
        kernel.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
        ]
        for blocks, x, reference in cases:
            m, n = reference.shape
            y = np.full((m, n), np.nan, dtype=np.float32)  # the kernel must overwrite every element
            kernel(blocks.ctypes.data, x.ctypes.data, y.ctypes.data, m, n, x.shape[1])
            assert np.isfinite(y).all(), variant.name
            rel_l2 = float(np.linalg.norm(y - reference) / np.linalg.norm(reference))
            assert rel_l2 < package.manifest.parity.rel_l2_max, (variant.name, rel_l2)


def test_host_source_refuses_a_format_it_does_not_read(package: KernelPackage, tmp_path: Path) -> None:
    build = subprocess.run(
        [*HOST_CC, "-DROWS=1", "-DUNROLL=1", "-DTB_FMT_Q5_0=1", str(EXAMPLE / "gemv.c"),
         "-o", str(tmp_path / "x.so")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert build.returncode != 0 and "reads Q8_0 or Q4_0" in build.stderr


@pytest.mark.parametrize("arch", ["gfx906", "gfx950", "sm_90"])
def test_hip_source_compiles_for_every_variant(package: KernelPackage, arch: str, tmp_path: Path) -> None:
    """hipcc (gfx906), clang 22 from ziglang (gfx950), nvcc (sm_90, no GPU needed to build): every Q4_0
    variant (the nibble path) and the two extremes for Q8_0; symbol `kernel` in a device ELF; AMD: no
    spills."""
    compiler = compiler_for_arch(arch)
    if not compiler.identity():
        pytest.skip(f"{compiler.name} is not installed here")
    backend = get_arch(arch).backend
    for fmt in FORMATS:
        space = package.space(backend)
        if fmt == "Q8_0":
            space = [v for v in space if v.name in ("R1/U1", "R8/U2")]
        units = compile_units(package, fmt, backend, space)
        assert len(units) == len(space) and units
        for unit in units:
            (variant,) = unit.variants
            out = tmp_path / f"{fmt}-{variant.name.replace('/', '_')}.co"
            result = compiler.compile(unit.source, arch, unit.defines, out)
            assert result.ok, result.log[-3000:]
            assert "kernel" in kernel_symbols(out)
            if backend == "cuda":
                assert all(blob[18:20] == b"\xbe\x00" for blob in device_elfs(out).values())  # EM_CUDA
                continue
            assert all(blob[18:20] == b"\xe0\x00" for blob in device_elfs(out).values())  # EM_AMDGPU
            (report,) = [r for r in analyze_file(out, with_disassembly=False) if r["name"] == "kernel"]
            assert report["vgpr_spills"] == 0 and report["sgpr_spills"] == 0, (fmt, variant.name, report)
