"""tb-prefill's GPU source run on the CPU: tests/kernels/emu/tb_portability.h emulates the execution model
(threads as coroutines, barriers, ldmatrix / mma.sync / MFMA / wgmma operand layouts as the vendors document
them, wgmma run late at the wait_group that retires it, mbarrier phases),
so the exact prefill.hip the H200 and the AMD GPUs compile is checked for parity here, on every machine:
tails in M and N, split-K, every pipeline depth, every format, both vendors' paths.

The launch geometry, the workspace size and the shared-memory size come from the manifest, as the runner
computes them; the kernel's own shared-memory layout must equal the manifest's ``smem``.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kernels.formats.registry import get_format
from kernels.packages.build import compile_units
from kernels.packages.expressions import as_int, parse
from kernels.packages.loader import INCLUDE_DIR, builtin_packages
from kernels.packages.package import DeviceFacts
from kernels.reference import Problem, Tolerance, build_problem

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

REPO = Path(__file__).resolve().parents[2]
EMU = REPO / "tests" / "kernels" / "emu"
PACKAGE = builtin_packages()["tb-prefill"]
SOURCE_DIR = PACKAGE.root
VOID = ctypes.c_void_p


class Emulated:
    """One variant of one format compiled against the emulator."""

    def __init__(self, lib: ctypes.CDLL, variant_name: str, fmt: str, backend: str, arch: str) -> None:
        self.lib = lib
        self.variant = PACKAGE.parse(variant_name, backend)
        self.fmt = get_format(fmt)
        self.device = DeviceFacts(backend, arch, 4, 32 if backend == "cuda" else 64)

    def cluster(self) -> tuple[int, int]:
        """The compile-time cluster shape (prefill.hip's TBP_CLUSTER): engine 3 pairs workgroups along x for
        stream-K (its persistent grid), along y (neighbouring weight tiles) otherwise."""
        p = self.variant.params
        if p["engine"] != 3:
            return (1, 1)
        return (2, 1) if p["split_k"] == 0 else (1, 2)

    def run(self, n: int, k: int, m: int, seed: int = 1) -> tuple[Problem, np.ndarray]:
        values = PACKAGE.bindings(self.variant, n, k, m, self.fmt, self.device)
        assert PACKAGE.point_problems(values) == [], PACKAGE.point_problems(values)
        geometry = PACKAGE.geometry(values)
        pre = PACKAGE.prelaunch_geometry(values)
        problem = build_problem(self.fmt.name, n, k, m, seed=seed)
        parts = PACKAGE_LAYOUT.arrays(problem)
        ws_size = parse(PACKAGE.args_for("cuda")[5].size or "0").evaluate_int(values)
        ws = np.full(ws_size, 0xCD, dtype=np.uint8)  # garbage, as a fresh device buffer may hold
        y = np.full((m, n), np.nan, dtype=np.float32)
        x = np.ascontiguousarray(problem.x, dtype=np.float32)
        ptrs = [VOID(0 if a is None else a.ctypes.data) for a in (parts["qs"], parts["qh"], parts["sc"])]
        common = [*ptrs, VOID(x.ctypes.data), VOID(y.ctypes.data), VOID(ws.ctypes.data), m, n, k]
        self.lib.emu_prep(pre.grid[0], pre.grid[1], *common)
        shared = geometry.shared_bytes if self.device.backend == "cuda" else as_int(values["smem"])
        self.lib.emu_main(*geometry.grid, geometry.block[0], ctypes.c_long(shared), *common, *self.cluster())
        return problem, y


from kernels.packages.layouts import layout_for  # noqa: E402

PACKAGE_LAYOUT = layout_for("tb-split")


def build(
    tmp: Path,
    fmt: str,
    variant_name: str,
    backend: str = "cuda",
    arch: str = "sm_90",
    defines: tuple[str, ...] = (),
) -> Emulated:
    """``defines``: extra -D options (a test of a guard in the kernel)."""
    variant = PACKAGE.parse(variant_name, backend)
    (unit,) = compile_units(PACKAGE, fmt, backend, [variant])
    symbol = PACKAGE.symbol(variant)
    p = variant.params
    vendor = ["-DTB_EMU_NV=1", "-DTB_PERM_STYLE=1"]
    if backend == "rocm":
        mfma = {"gfx906": 0, "gfx90a": 16}.get(arch, 32)
        vendor = ["-DTB_EMU_AMD=1", f"-DTB_EMU_MFMA={mfma}", "-DTB_PERM_STYLE=2"]
    layout = {0: "TbpLayout", 1: "TbpWgLayout", 2: "TbpWsLayout", 3: "TbpWsLayout"}[p["engine"]]
    smem = f"{layout}<{p['n_tile']},{p['m_tile']},{p['kb']}>::smem({p['stages']})"
    out = tmp / f"emu_{fmt}_{symbol}_{backend}_{arch}.so"
    # the emulator's tb_portability.h must win even over tb_formats.h's own directory: both in one folder
    include = tmp / "emu-include"
    include.mkdir(exist_ok=True)
    shutil.copy(EMU / "tb_portability.h", include / "tb_portability.h")
    for header in ("tb_formats.h", "tb_i8mma.h"):  # tb_i8mma.h: the operand unpack shared with tb-decode
        shutil.copy(INCLUDE_DIR / header, include / header)
    argv = [
        "g++", "-O1", "-std=c++17", "-fPIC", "-shared", "-w", *vendor,
        *(f"-D{k}={v}" for k, v in sorted(unit.defines.items())),
        f"-DEMU_MAIN={symbol}", f"-DEMU_PREP=tb_prefill_prep_sk{p['split_k']}", f"-DEMU_SMEM={smem}",
        *(f"-D{d}" for d in defines),
        f"-I{include}", f"-I{SOURCE_DIR}", "-x", "c++", str(EMU / "run_prefill.cpp"),
        "-o", str(out),
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lib = ctypes.CDLL(str(out))
    lib.emu_smem_bytes.restype = ctypes.c_long
    return Emulated(lib, variant_name, fmt, backend, arch)


TOL = Tolerance("emulated", PACKAGE.manifest.parity.cosine_min, PACKAGE.manifest.parity.rel_l2_max)


def check(emu: Emulated, n: int, k: int, m: int) -> None:
    problem, y = emu.run(n, k, m)
    assert not np.isnan(y).any(), f"{int(np.isnan(y).sum())} cells never written"
    parity = problem.check(y, TOL)
    assert parity.passed, parity
    # the int8 model (quantised x, exact weights) is what the kernel computes: much tighter than the tolerance
    assert parity.rel_l2 < 1.2e-2, parity


NV_CASES = [
    # (format, variant, n, k, m): tails in n and m, every stage depth, split-K, 64 x 64 warp tiles
    ("Q8_0", "N128/M64/W4x2/K4/S3/SK1/MB1/E0", 200, 512, 37),
    ("Q4_0", "N64/M64/W2x2/K4/S3/SK2/MB1/E0", 136, 768, 70),
    ("Q4_1", "N128/M32/W4x1/K4/S4/SK1/MB1/E0", 130, 512, 33),
    ("Q5_0", "N128/M32/W4x1/K8/S3/SK1/MB1/E0", 64, 512, 19),
    ("Q5_1", "N64/M64/W2x2/K4/S3/SK4/MB1/E0", 72, 1024, 50),
    ("IQ4_NL", "N128/M128/W2x4/K4/S3/SK1/MB1/E0", 140, 512, 129),
    ("Q4_K", "N128/M64/W4x2/K4/S3/SK2/MB1/E0", 150, 768, 65),
    ("Q6_K", "N64/M64/W2x2/K4/S3/SK1/MB1/E0", 90, 768, 40),
    ("Q6_K", "N64/M64/W2x2/K8/S3/SK2/MB1/E0", 130, 1024, 17),  # Q6_K at K8: 4 warps only (no-spill rules)
    ("IQ4_XS", "N256/M64/W4x2/K4/S3/SK1/MB1/E0", 260, 512, 64),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "variant", "n", "k", "m"), NV_CASES, ids=[f"{c[0]}-{c[1]}" for c in NV_CASES]
)
def test_nvidia_path_passes_parity(tmp_path: Path, fmt: str, variant: str, n: int, k: int, m: int) -> None:
    emu = build(tmp_path, fmt, variant)
    check(emu, n, k, m)


WGMMA_CASES = [
    # engine 1 (wgmma, emulated per the PTX layouts): 1 / 2 / 4 warpgroups, tails in n and m, split-K
    ("Q4_0", "N64/M64/W4x1/K4/S3/SK1/MB1/E1", 100, 512, 37),
    ("Q8_0", "N128/M64/W4x2/K4/S3/SK2/MB1/E1", 150, 512, 70),
    ("Q4_1", "N64/M128/W4x1/K4/S3/SK1/MB1/E1", 72, 256, 130),
    ("Q5_0", "N64/M64/W4x1/K8/S3/SK1/MB1/E1", 64, 512, 19),
    ("Q5_1", "N64/M64/W4x1/K4/S4/SK4/MB1/E1", 72, 1024, 50),
    ("IQ4_NL", "N128/M128/W4x2/K4/S3/SK1/MB1/E1", 140, 256, 33),
    ("Q4_K", "N64/M64/W4x1/K4/S3/SK2/MB1/E1", 90, 768, 65),
    ("Q6_K", "N64/M64/W4x1/K4/S3/SK1/MB1/E1", 90, 768, 40),
    ("Q6_K", "N64/M64/W4x1/K8/S3/SK2/MB1/E1", 70, 1024, 17),
    ("IQ4_XS", "N256/M64/W4x4/K4/S3/SK1/MB1/E1", 260, 256, 64),
]


def check_wgmma(emu: Emulated, n: int, k: int, m: int) -> None:
    """fp16 activations and fp16 weights (scales folded in): far tighter than the int8 engine's 1.2e-2."""
    problem, y = emu.run(n, k, m)
    assert not np.isnan(y).any(), f"{int(np.isnan(y).sum())} cells never written"
    parity = problem.check(y, TOL)
    assert parity.passed, parity
    assert parity.rel_l2 < 3e-3, parity


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "variant", "n", "k", "m"), WGMMA_CASES, ids=[f"{c[0]}-{c[1]}" for c in WGMMA_CASES]
)
def test_wgmma_path_passes_parity(tmp_path: Path, fmt: str, variant: str, n: int, k: int, m: int) -> None:
    check_wgmma(build(tmp_path, fmt, variant), n, k, m)


def test_wgmma_path_fast(tmp_path: Path) -> None:
    """The default-run case of engine 1: Q4_K (mins, super-block scales), tails in N and M."""
    check_wgmma(build(tmp_path, "Q4_K", "N64/M64/W4x1/K4/S3/SK1/MB1/E1"), 72, 512, 21)


WS_CASES = [
    # engine 2 (warp-specialised wgmma: producer warpgroup, mbarrier ring, consumers with a group in flight):
    # every consumer geometry (1 / 2 / 4 warpgroups x 1 / 2 m64 tiles) in each bench format, tails in n and m,
    # split-K, the ring wrapping several times (k / (32 kb) / split_k stages > stages)
    ("Q4_0", "N256/M64/W4x2/K4/S3/SK1/MB1/E2", 300, 1024, 70),
    ("Q4_0", "N64/M128/W4x1/K4/S3/SK2/MB1/E2", 100, 1536, 37),
    ("Q4_0", "N256/M64/W4x4/K4/S4/SK2/MB1/E2", 270, 1536, 100),
    ("Q4_0", "N128/M128/W4x2/K4/S4/SK1/MB1/E2", 130, 768, 129),
    ("Q4_0", "N128/M128/W4x1/K4/S3/SK1/MB1/E2", 140, 1024, 60),
    ("Q8_0", "N128/M128/W4x2/K4/S4/SK2/MB1/E2", 150, 1536, 37),
    ("Q8_0", "N256/M64/W4x4/K4/S3/SK1/MB1/E2", 200, 768, 130),
    ("Q8_0", "N128/M128/W4x1/K4/S4/SK2/MB1/E2", 136, 1024, 20),
    ("Q4_K", "N128/M128/W4x1/K4/S3/SK1/MB1/E2", 130, 1024, 129),
    ("Q4_K", "N256/M64/W4x4/K4/S4/SK2/MB1/E2", 260, 1536, 21),
    ("Q4_K", "N128/M128/W4x2/K4/S3/SK2/MB1/E2", 200, 768, 64),
    ("Q4_K", "N64/M128/W4x1/K4/S4/SK1/MB1/E2", 70, 1280, 90),
    ("Q6_K", "N64/M128/W4x1/K4/S3/SK1/MB1/E2", 90, 768, 40),
    ("Q5_1", "N128/M128/W4x2/K4/S3/SK1/MB1/E2", 72, 512, 50),
    ("IQ4_XS", "N256/M64/W4x2/K4/S4/SK1/MB1/E2", 260, 768, 64),
    # stream-K (SK0) on the emulator's 4 "SMs" (G = 4): shares that start and end mid-tile, mid-K, the ring
    # wrapping across segments; whole waves run tile by tile first (T / G - 1 of them, all when G divides T)
    ("Q4_0", "N256/M64/W4x2/K4/S3/SK0/MB1/E2", 300, 1280, 130),  # 2 x 3 tiles x 10 stages: 60 units, 15 each
    ("Q8_0", "N256/M64/W4x2/K4/S4/SK0/MB1/E2", 600, 1536, 130),  # 9 tiles: 4 whole, then 5 x 12 = 60 units
    ("Q4_K", "N256/M64/W4x4/K4/S4/SK0/MB1/E2", 260, 1792, 250),  # 8 tiles: 2 whole waves, no units
    ("Q4_K", "N128/M128/W4x2/K4/S4/SK0/MB1/E2", 300, 1280, 129),  # 3 x 2 x 10: 60 units, 15 each
    ("Q8_0", "N128/M128/W4x2/K4/S4/SK0/MB1/E2", 300, 768, 37),  # 3 tiles x 6: 18 units, 4 / 5 / 4 / 5
    ("Q4_0", "N128/M128/W4x2/K4/S4/SK0/MB1/E2", 100, 256, 20),  # 1 x 2: 2 units, two workgroups idle
    # the WIDE tile (4 consumers of m64 x 128 tokens under setmaxnreg, each group drained per block, a
    # stage released after its last block): tails in n and m, the ring wrapping, stream-K shares crossing
    # tiles mid-K
    ("Q8_0", "N256/M128/W4x4/K4/S3/SK1/MB1/E2", 300, 1024, 150),
    ("Q4_K", "N256/M128/W4x4/K4/S4/SK1/MB1/E2", 260, 1536, 129),
    ("Q4_0", "N256/M128/W4x4/K4/S4/SK0/MB1/E2", 520, 1280, 200),  # 3 x 2 tiles x 10 stages: 60 units, 15 each
    ("Q8_0", "N256/M128/W4x4/K4/S3/SK0/MB1/E2", 600, 1024, 130),  # 3 x 2 tiles x 8 stages: 48 units, 12 each
    # engine 3 (the WIDE tile in 2-CTA clusters, one workgroup of each run every third pass: a missing
    # cross-workgroup wait fails parity): pairs of weight tiles along y, tails, the ring wrapping; stream-K
    # pairs along x (2 clusters on the emulator's 4 "SMs"): 3 pair tiles x 6 stages, 9 units per cluster
    ("Q8_0", "N256/M128/W4x4/K4/S3/SK1/MB1/E3", 500, 1024, 150),
    ("Q4_K", "N256/M128/W4x4/K4/S4/SK1/MB1/E3", 1000, 512, 100),
    ("Q4_0", "N256/M128/W4x4/K4/S4/SK0/MB1/E3", 500, 768, 300),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "variant", "n", "k", "m"), WS_CASES, ids=[f"{c[0]}-{c[1]}" for c in WS_CASES]
)
def test_warp_specialised_path_passes_parity(
    tmp_path: Path, fmt: str, variant: str, n: int, k: int, m: int
) -> None:
    check_wgmma(build(tmp_path, fmt, variant), n, k, m)


def test_warp_specialised_path_fast(tmp_path: Path) -> None:
    """The default-run case of engine 2: Q4_K, two consumers of two m64 tiles, tails, the ring wrapping."""
    check_wgmma(build(tmp_path, "Q4_K", "N256/M64/W4x2/K4/S3/SK1/MB1/E2"), 270, 1024, 70)


def test_warp_specialised_stream_k_fast(tmp_path: Path) -> None:
    """The default-run case of stream-K on the emulator's 4 "SMs": 3 x 3 tiles x 4 stages, one whole wave
    (tiles 0-3) then 5 tiles' 20 units, 5 per workgroup, crossing tiles mid-K; Q4_0 with tails in N and M. A
    share lost or added twice fails parity; a ring phase out of step across segments hangs (the emulator
    aborts)."""
    check_wgmma(build(tmp_path, "Q4_0", "N256/M64/W4x2/K4/S4/SK0/MB1/E2"), 600, 512, 150)


def test_cluster_path_fast(tmp_path: Path) -> None:
    """The default-run case of engine 3: one cluster of two workgroups (weight tiles 0-255 and 256-499, a
    tail), each copying half of the shared activation tile into both, 4 stages on a ring of 3, 60 tokens."""
    check_wgmma(build(tmp_path, "Q4_0", "N256/M128/W4x4/K4/S3/SK1/MB1/E3"), 500, 512, 60)


@pytest.mark.parametrize("fmt", ["Q4_0", "Q4_K"])
def test_nvidia_path_fast(tmp_path: Path, fmt: str) -> None:
    """The default-run subset: one symmetric and one K-quant format, tails in both N and M."""
    emu = build(tmp_path, fmt, "N64/M64/W2x2/K4/S3/SK1/MB1/E0")
    check(emu, 72, 512, 21)


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_1", "Q6_K"])
def test_kernel_shared_memory_equals_the_manifest(tmp_path: Path, fmt: str) -> None:
    for name in (
        "N128/M64/W4x2/K4/S3/SK1/MB1/E0",
        "N64/M128/W2x2/K8/S3/SK1/MB1/E0",
        "N128/M128/W4x2/K4/S3/SK1/MB1/E1",
        "N256/M64/W4x4/K4/S3/SK1/MB1/E2",
        "N256/M128/W4x4/K4/S3/SK1/MB1/E2",
    ):
        emu = build(tmp_path, fmt, name)
        values = PACKAGE.bindings(emu.variant, 4096, 4096, 512, emu.fmt, emu.device)
        assert emu.lib.emu_smem_bytes() == as_int(values["smem"]), name


AMD_CASES = [
    # (arch, format, variant, n, k, m)
    ("gfx942", "Q4_0", "N64/M32/W2x2/K4/S2/SK1/MB1/E0", 72, 512, 37),
    ("gfx942", "Q4_K", "N128/M64/W2x2/K4/S2/SK2/MB1/E0", 130, 768, 40),
    ("gfx942", "Q6_K", "N64/M32/W2x2/K4/S2/SK1/MB1/E0", 64, 512, 20),
    ("gfx950", "Q5_1", "N64/M64/W2x2/K4/S2/SK1/MB1/E0", 70, 512, 33),
    ("gfx90a", "Q8_0", "N64/M32/W2x2/K4/S2/SK2/MB1/E0", 66, 512, 31),
    ("gfx90a", "IQ4_XS", "N128/M32/W4x2/K4/S2/SK1/MB1/E0", 128, 512, 16),
    ("gfx906", "Q5_0", "N64/M32/W2x2/K4/S2/SK1/MB1/E0", 64, 512, 18),
    ("gfx906", "Q6_K", "N64/M32/W2x2/K4/S2/SK1/MB1/E0", 40, 512, 9),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arch", "fmt", "variant", "n", "k", "m"), AMD_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in AMD_CASES]
)
def test_amd_paths_pass_parity(
    tmp_path: Path, arch: str, fmt: str, variant: str, n: int, k: int, m: int
) -> None:
    emu = build(tmp_path, fmt, variant, backend="rocm", arch=arch)
    check(emu, n, k, m)


@pytest.mark.parametrize("arch", ["gfx942", "gfx906"])
def test_amd_path_fast(tmp_path: Path, arch: str) -> None:
    """The default-run subset: MFMA 16x16x32 and sdot4, a 4-bit K-quant with tails."""
    emu = build(tmp_path, "Q4_K", "N64/M32/W2x2/K4/S2/SK1/MB1/E0", backend="rocm", arch=arch)
    check(emu, 70, 512, 19)
