"""tb-mxfp4-gemm without a GPU: the manifest and its spaces, the host version through the runner and
against a numpy emulation of the MX arithmetic, both GPU sources run on the CPU emulators
(tests/fixtures/gpu_emu) against the arithmetic each is meant to do, and real compiles: clang 22 for
gfx950 (every variant, symbols, scaled MFMAs, no scratch) and nvcc for sm_90 (ptxas: no spills).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

from kernels.formats import fp4
from kernels.formats.registry import get_format
from kernels.packages.build import compile_units
from kernels.packages.loader import INCLUDE_DIR, builtin_packages, load_folder
from kernels.packages.package import DeviceFacts, KernelPackage
from kernels.reference import Problem, Tolerance, build_problem
from service.sweeps.spec import SweepSpec
from workers.backends.base import TaskSpec
from workers.backends.host import HostBackend

REPO = Path(__file__).resolve().parents[2]
EMU = REPO / "tests" / "fixtures" / "gpu_emu"
PACKAGE = builtin_packages()["tb-mxfp4-gemm"]
TOLERANCE = Tolerance("tb-mxfp4-gemm", PACKAGE.manifest.parity.cosine_min, PACKAGE.manifest.parity.rel_l2_max)
FACTS = {"cuda": DeviceFacts("cuda", "sm_90", 132, 32), "rocm": DeviceFacts("rocm", "gfx950", 256, 64)}
# fast runs cover every parameter value at least once; the slow run takes every variant
CUDA_FAST = ("M64/N128/K64/W4/S2/L0/I16", "M64/N256/K128/W8/S3/L0/I16", "M128/N256/K64/W8/S4/L0/I16")
ROCM_FAST = (
    "M64/N64/K256/W8/S3/L1/I16",
    "M128/N128/K128/W4/S2/L1/I16",
    "M128/N128/K128/W4/S3/L0/I32",
    "M128/N256/K128/W8/S2/L0/I32",
    "M64/N256/K256/W4/S2/L0/I16",
)


def _cases(backend: str, fast: tuple[str, ...]) -> list[object]:
    return [
        pytest.param(v.name, marks=[] if v.name in fast else [pytest.mark.slow], id=v.name.replace("/", "-"))
        for v in PACKAGE.space(backend)
    ]


def test_package_is_built_in_with_a_space_per_backend() -> None:
    m = PACKAGE.manifest
    assert (m.phase, m.formats, m.weights) == ("prefill", ["MXFP4"], "prepare")
    assert [len(PACKAGE.space(b)) for b in ("host", "cuda", "rocm")] == [2, 23, 124]
    assert set(ROCM_FAST) <= {v.name for v in PACKAGE.space("rocm")}
    assert set(CUDA_FAST) <= {v.name for v in PACKAGE.space("cuda")}
    # the "4-wave" design, both MFMA shapes, both LDS arrangements and both depths are in the rocm space
    params = [v.params for v in PACKAGE.space("rocm")]
    for name, wanted in {"waves": {4, 8}, "mfma": {16, 32}, "lds": {0, 1}, "stages": {2, 3}}.items():
        assert {p[name] for p in params} == wanted
    mx = get_format("MXFP4")
    values = PACKAGE.bindings(
        PACKAGE.parse("M64/N64/K128/W4/S2/L1/I32", "rocm"), 5120, 17408, 600, mx, FACTS["rocm"]
    )
    assert PACKAGE.point_problems(values) == []
    on_gfx942 = {**values, "arch": "gfx942"}
    assert PACKAGE.point_problems(on_gfx942) == ["backend != 'rocm' or arch == 'gfx950'"]
    geometry = PACKAGE.geometry(values)
    assert geometry.grid == (80, 10, 1) and geometry.block == (256, 1, 1) and geometry.shared_bytes == 0
    cuda = PACKAGE.bindings(
        PACKAGE.parse("M128/N256/K64/W8/S4/L0/I16", "cuda"), 8192, 8192, 8192, mx, FACTS["cuda"]
    )
    assert PACKAGE.geometry(cuda).shared_bytes == 4 * 384 * 64 + 4 * 256 * 64 * 17 // 32 <= 232448


def test_sweep_spec_accepts_mxfp4_for_the_package() -> None:
    spec = SweepSpec.model_validate(
        {"arch": "sm_90", "phase": "prefill", "kernel": "tb-mxfp4-gemm", "formats": ["MXFP4"],
         "shapes": [{"name": "s", "n": 512, "k": 1024}], "m": [128]}
    )  # fmt: skip
    assert spec.problems(PACKAGE) == []
    wrong = SweepSpec.model_validate({**spec.model_dump(), "formats": ["Q8_0"]})
    assert any("does not read Q8_0" in p.message for p in wrong.problems(PACKAGE))


def _mx_expected(problem: Problem) -> np.ndarray:
    """What the host and gfx950 paths compute: MXFP8 x times the MXFP4 weights, exactly."""
    w = quants.dequantize(problem.weights, GGMLQuantizationType.MXFP4).astype(np.float64)
    return fp4.mxfp8_activations(problem.x) @ w.T


def test_host_version_passes_parity_through_the_runner(tmp_path: Path) -> None:
    names = tuple(v.name for v in PACKAGE.space("host"))
    spec = TaskSpec(
        arch="host", phase="prefill", format="MXFP4", shape="t", n=128, k=512, m=37, variants=names,
        min_dispatches=3, warmup=1, kernel="tb-mxfp4-gemm",
    )  # fmt: skip
    result = HostBackend(tmp_path).run_task(spec)
    assert result.artifact.ok, result.artifact.log
    for r in result.results:
        assert r.error is None and r.parity is not None and r.parity.passed, (r.variant, r.error, r.parity)
        assert 0.01 < r.parity.rel_l2 < 0.045  # the MXFP8 activations, not a kernel fault
        assert len(r.dispatches) == 3
    assert result.weight_copies > 1  # every copy was written by the package's prepare kernel


def test_host_version_is_the_mx_arithmetic_exactly(tmp_path: Path) -> None:
    variants = PACKAGE.space("host")
    compiled = HostBackend(tmp_path).build(PACKAGE, "MXFP4", variants)
    assert not compiled.errors and compiled.prepare is not None
    p = build_problem("MXFP4", n=64, k=384, m=19, seed=7)
    prepared = np.zeros(64 * 384 // 2 + 64 * 384 // 32, dtype=np.uint8)
    compiled.prepare.call(p.weights.ctypes.data, prepared.ctypes.data, 64, 384)
    np.testing.assert_array_equal(prepared, fp4.planar_mxfp4(p.weights))
    expected = _mx_expected(p)
    atol = 2e-5 * float(np.abs(expected).max())
    x = np.ascontiguousarray(p.x, dtype=np.float32)
    for variant in variants:
        y = np.full((19, 64), np.nan, dtype=np.float32)
        compiled.kernels[variant.name].call(prepared.ctypes.data, x.ctypes.data, y.ctypes.data, 19, 64, 384)
        np.testing.assert_allclose(y, expected, rtol=2e-5, atol=atol)
    # one dropped 32-block is far outside that bound, however loose the package tolerance is
    w = quants.dequantize(p.weights, GGMLQuantizationType.MXFP4).astype(np.float64)
    dropped = fp4.mxfp8_activations(p.x)[:, 32:] @ w[:, 32:].T
    assert np.abs(expected - dropped).max() > 1000 * atol


# ---- the GPU sources on the CPU emulators ----------------------------------------------------------


def _emulator(tmp: Path, backend: str, package: KernelPackage = PACKAGE) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    (unit,) = compile_units(package, "MXFP4", backend, package.space(backend))
    out = tmp / f"emu-{backend}"
    hip = ["-DTB_EMU_HIP"] if backend == "rocm" else []
    argv = [
        "g++", "-std=c++17", "-O1", "-w", f"-I{EMU}", f"-I{unit.source.parent}", f"-I{INCLUDE_DIR}",
        f"-DTB_MX_VARIANTS={unit.defines['TB_MX_VARIANTS']}", *hip,
        "-x", "c++", str(EMU / "emu_driver.cpp"), "-o", str(out),
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def emulators(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("gpu-emu")
    return {backend: _emulator(tmp, backend) for backend in ("cuda", "rocm")}


@pytest.fixture(scope="module")
def emu_problem(tmp_path_factory: pytest.TempPathFactory) -> tuple[Problem, Path]:
    # m = 130: a partial M tile; K = 768: 12 / 6 / 3 K steps, so every ring and buffer wraps around
    problem = build_problem("MXFP4", n=256, k=768, m=130, seed=11)
    folder = tmp_path_factory.mktemp("emu-data")
    (folder / "w.bin").write_bytes(problem.weights.tobytes())
    (folder / "x.bin").write_bytes(np.ascontiguousarray(problem.x, dtype=np.float32).tobytes())
    return problem, folder


def _run_emulated(
    binary: Path, package: KernelPackage, backend: str, name: str, data: tuple[Problem, Path], mode: str
) -> np.ndarray:
    problem, folder = data
    variant = package.parse(name, backend)
    values = package.bindings(variant, problem.n, problem.k, problem.m, get_format("MXFP4"), FACTS[backend])
    assert package.point_problems(values) == []
    g = package.geometry(values)
    out = folder / f"y-{backend}-{mode}.bin"
    argv = [
        str(binary), package.symbol(variant), str(problem.m), str(problem.n), str(problem.k), str(g.grid[0]),
        str(g.grid[1]), str(g.block[0]), str(g.shared_bytes), str(folder / "w.bin"), str(folder / "x.bin"),
        str(out), mode,
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    return np.fromfile(out, dtype=np.float32).reshape(problem.m, problem.n)


def _bf16(a: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("name", _cases("cuda", CUDA_FAST))
@pytest.mark.parametrize("mode", ["early", "late"])
def test_sm90_source_on_the_emulator(
    emulators: dict[str, Path], emu_problem: tuple[Problem, Path], name: str, mode: str
) -> None:
    problem = emu_problem[0]
    y = _run_emulated(emulators["cuda"], PACKAGE, "cuda", name, emu_problem, mode)
    w = quants.dequantize(problem.weights, GGMLQuantizationType.MXFP4).astype(np.float64)
    expected = _bf16(problem.x).astype(np.float64) @ w.T  # bf16 x, exact bf16 weights, fp32 sums
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5 * float(np.abs(expected).max()))
    parity = problem.check(y, TOLERANCE)
    assert parity.passed and parity.rel_l2 < 5e-3, parity


@pytest.mark.parametrize("name", _cases("rocm", ROCM_FAST))
def test_gfx950_source_on_the_emulator(
    emulators: dict[str, Path], emu_problem: tuple[Problem, Path], name: str
) -> None:
    problem = emu_problem[0]
    y = _run_emulated(emulators["rocm"], PACKAGE, "rocm", name, emu_problem, "early")
    expected = _mx_expected(problem)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5 * float(np.abs(expected).max()))
    assert problem.check(y, TOLERANCE).passed


def test_the_emulator_catches_a_missing_cp_async_wait(
    tmp_path: Path, emu_problem: tuple[Problem, Path]
) -> None:
    folder = tmp_path / "tb-mxfp4-gemm"
    shutil.copytree(PACKAGE.root, folder)
    source = folder / "mxfp4_gemm_sm90.cu"
    text = source.read_text()
    broken = text.replace("tb_cp_wait<STAGES - 2>(); /* tile kt+2", "tb_cp_wait<STAGES - 1>(); /* tile kt+2")
    assert broken != text
    source.write_text(broken)
    package = load_folder(folder)
    binary = _emulator(tmp_path, "cuda", package)
    name = "M64/N128/K64/W4/S3/L0/I16"
    problem = emu_problem[0]
    early = _run_emulated(binary, package, "cuda", name, emu_problem, "early")
    late = _run_emulated(binary, package, "cuda", name, emu_problem, "late")
    assert problem.check(early, TOLERANCE).passed  # copies that land at once hide the bug ...
    assert not problem.check(late, TOLERANCE).passed  # ... copies that land late expose it


# ---- real compilers ---------------------------------------------------------------------------------


def _zig_clang() -> object:
    from workers.compilers import compiler_for_arch

    compiler = compiler_for_arch("gfx950")
    if not compiler.identity():
        pytest.skip("clang 22 (ziglang) is not installed here")
    return compiler


def _compile_gfx950(tmp: Path, names: list[str]) -> tuple[Path, dict[str, str]]:
    compiler = _zig_clang()
    variants = [PACKAGE.parse(name, "rocm") for name in names]
    (unit,) = compile_units(PACKAGE, "MXFP4", "rocm", variants)
    result = compiler.compile(unit.source, "gfx950", unit.defines, tmp / "mxfp4.co")  # type: ignore[attr-defined]
    assert result.ok, result.log[-4000:]
    return result.path, unit.symbols(PACKAGE)


def _check_gfx950(path: Path, symbols: dict[str, str], with_disassembly: bool) -> None:
    from workers.compilers.codeobject import kernel_symbols
    from workers.isa.analyze import analyze_file

    assert set(symbols.values()) | {"tb_mxfp4_prepare"} <= kernel_symbols(path)
    reports = {r["name"]: r for r in analyze_file(path, with_disassembly=with_disassembly)}
    for name, symbol in symbols.items():
        r = reports[symbol]
        assert r["scratch_bytes"] == 0 and r["vgpr_spills"] == 0, (name, r["scratch_bytes"], r["vgpr_spills"])
        assert 0 < r["lds_bytes"] <= 160 * 1024
        if with_disassembly:
            assert r["census"]["kernel"]["v_mfma"] > 0, name


def test_gfx950_compiles_representative_variants_with_scaled_mfma(tmp_path: Path) -> None:
    path, symbols = _compile_gfx950(tmp_path, list(ROCM_FAST))
    _check_gfx950(path, symbols, with_disassembly=True)
    from workers.isa.disasm import disassemble_llvm

    text = "\n".join(i.text for f in disassemble_llvm(path.read_bytes(), "gfx950") for i in f.instructions)
    assert "v_mfma_scale_f32_16x16x128_f8f6f4" in text and "v_mfma_scale_f32_32x32x64_f8f6f4" in text


@pytest.mark.slow
def test_gfx950_compiles_every_variant_without_scratch(tmp_path: Path) -> None:
    names = [v.name for v in PACKAGE.space("rocm")]
    path, symbols = _compile_gfx950(tmp_path, names)
    assert len(symbols) == len(names) == 124
    _check_gfx950(path, symbols, with_disassembly=False)


def _ptxas(tmp: Path, names: list[str]) -> dict[str, str]:
    from workers.compilers.nvcc import find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc is not installed here")
    (unit,) = compile_units(PACKAGE, "MXFP4", "cuda", [PACKAGE.parse(n, "cuda") for n in names])
    defines = [f"-D{k}={v.replace(',', chr(92) + ',')}" for k, v in sorted(unit.defines.items())]
    argv = [
        nvcc, "-cubin", "-arch=sm_90", "-O3", "-std=c++17", "-Xptxas", "-v", f"-I{unit.source.parent}",
        f"-I{INCLUDE_DIR}", *defines, "-x", "cu", str(unit.source), "-o", str(tmp / "mxfp4.cubin"),
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report: dict[str, str] = {}
    current = ""
    for line in (proc.stdout + proc.stderr).splitlines():
        found = re.search(r"Compiling entry function '(\w+)'", line)
        if found:
            current = found.group(1)
        elif current and ("spill" in line or "registers" in line):
            report[current] = report.get(current, "") + line
    assert set(unit.symbols(PACKAGE).values()) <= set(report)
    return report


@pytest.mark.parametrize("names", [pytest.param(list(CUDA_FAST), id="fast"),
                                   pytest.param([v.name for v in PACKAGE.space("cuda")], id="all",
                                                marks=pytest.mark.slow)])  # fmt: skip
def test_sm90_variants_compile_without_spills(tmp_path: Path, names: list[str]) -> None:
    for symbol, text in _ptxas(tmp_path, names).items():
        assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in text, (symbol, text)
        assert int(re.search(r"Used (\d+) registers", text).group(1)) <= 255  # type: ignore[union-attr]


# ---- bench/mxfp4_gemm.py's CPU-side pieces (its GPU run happens on the H200 only) ------------------


def _bench() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("mxfp4_bench", REPO / "bench" / "mxfp4_gemm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mxfp4_bench"] = module  # its process pool pickles functions by module name
    spec.loader.exec_module(module)
    return module


def test_bench_points_cache_and_result_rows(tmp_path: Path) -> None:
    bench: Any = _bench()
    todo = bench.points(["square", "Qwen36_FFN_GateUp"], [128, 2048])
    assert [(p["shape"], p["m"]) for p in todo] == [
        ("square", 8192), ("Qwen36_FFN_GateUp", 128), ("Qwen36_FFN_GateUp", 2048)
    ]  # fmt: skip
    import kernels.reference as ref

    cache = bench.quantize_all({(64, 256)})
    uncached = build_problem("MXFP4", n=64, k=256, m=3, seed=bench.SEED)
    original = ref.quantize_random
    bench.install_weight_cache(cache)
    try:
        cached = build_problem("MXFP4", n=64, k=256, m=3, seed=bench.SEED)
        assert np.array_equal(cached.weights, uncached.weights) and cached.weights is cache[(64, 256)]
        # the row processing, on the host backend (same runner, same result objects as on the GPU)
        point = {"shape": "t", "n": 64, "k": 256, "m": 3}
        row = bench.run_point(HostBackend(tmp_path), PACKAGE, point, dispatches=3, warmup=1, arch="host")
    finally:
        ref.quantize_random = original
    assert row["variants_passing"] == row["variants_total"] == 2
    assert row["tuned_variant"] in row["variants"] and row["tuned_tflops"] > 0
    assert row["true_bytes"] == 64 * 256 * 17 // 32 + 4 * 3 * 256 + 4 * 3 * 64
    assert row["tuned_us"] == min(v["median_us"] for v in row["variants"].values())


def test_bench_refuses_bad_arguments() -> None:
    bench: Any = _bench()
    for argv in (["--shapes", "nope"], ["--m", "x"], ["--m", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            bench.parse_args(argv)
        assert exit_info.value.code == 2
