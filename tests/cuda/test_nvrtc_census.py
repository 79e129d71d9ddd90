"""The device's own compiler (NVRTC 13.0.88, `make venv` installs it; no GPU needed) judges the CUDA variants:
registers and local memory as ptxas reports them through NVRTC, not as a local nvcc would (the two disagreed
on the H200 twice). The variants the GPU tests and the benches launch must not spill; the whole spaces are
checked by `make test-full` (slow: ~40 NVRTC minutes on 2 cores)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from kernels.formats.registry import FORMATS
from kernels.packages.loader import builtin_packages
from kernels.packages.package import DeviceFacts, KernelPackage
from workers.harness import cuda_driver as cd
from workers.harness.nvrtc_census import census, parse_ptxas_report

pytestmark = pytest.mark.skipif(cd.nvrtc is None, reason=f"NVRTC is not installed: {cd.IMPORT_ERROR}")

REPO = Path(__file__).resolve().parents[2]
DECODE = builtin_packages()["tb-decode"]
PREFILL = builtin_packages()["tb-prefill"]


def _gpu_test_variants() -> tuple[tuple[str, ...], tuple[str, ...]]:
    sys.path.insert(0, str(REPO / "bench"))
    import prefill_roofline  # bench/: the candidates a device run times

    from tests.cuda.test_cuda_gpu import PREFILL_VARIANTS, VARIANTS

    return VARIANTS, tuple(dict.fromkeys((*PREFILL_VARIANTS, *prefill_roofline.CANDIDATES)))


H200 = DeviceFacts("cuda", "sm_90", 132, 32)


def _kept(package: KernelPackage, fmt: str, names: Iterable[str]) -> list[str]:
    """The names the format's point rules keep at a qwen36 shape (the no-spill rules name formats)."""
    m = 128 if package.manifest.phase == "prefill" else 1
    space = {v.name: v for v in package.space("cuda")}  # parse() per name costs a space walk each
    return [
        name
        for name in names
        if name in space
        and not package.point_problems(package.bindings(space[name], 17408, 5120, m, FORMATS[fmt], H200))
    ]


def test_the_report_parser_reads_a_real_spilling_and_a_clean_kernel(tmp_path: Path) -> None:
    from workers.harness.cuda_compile import compile_cubin
    from workers.harness.nvrtc_census import PTXAS_VERBOSE

    source = tmp_path / "k.cu"
    source.write_text(
        'extern "C" __global__ void clean(float *y) { y[threadIdx.x] *= 2.0f; }\n'
        'extern "C" __global__ void __launch_bounds__(1024, 2) indexed(float *y, int i) {\n'
        "  float a[64];\n"
        "  for (int j = 0; j < 64; ++j) a[j] = y[j * 97 + threadIdx.x];\n"
        "  for (int j = 0; j < 64; ++j) a[(j * i) & 63] += a[j];\n"  # indexed stores: a lives in memory
        "  y[threadIdx.x] = a[i & 63];\n"
        "}\n"
    )
    result = compile_cubin(
        source, tmp_path / "art", "k", ["--gpu-architecture=sm_90a", PTXAS_VERBOSE], ["clean", "indexed"]
    )
    assert result.ok, result.log
    report = parse_ptxas_report(result.log)
    assert set(report) == {"clean", "indexed"}
    assert not report["clean"].spills and report["clean"].registers > 0
    assert (
        report["indexed"].spills and report["indexed"].stack_frame >= 256
    )  # the indexed array lives in local memory


WGMMA_SOURCE = r"""
#define WGMMA(d, a, b)                                                                 \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                              \
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "                   \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"             \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                       \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b))
typedef unsigned long long u64;
template <bool TOUCH>
__device__ void body(float *y, const unsigned *x, u64 b, int n) {
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    int i = 0;
    do {
        unsigned a[4] = {x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]};
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        WGMMA(d, a, b);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        if (TOUCH) d[0] *= 0.5f; /* an accumulator written while its wgmma may still run */
    } while (++i < n);
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    for (int e = 0; e < 4; ++e) y[4 * threadIdx.x + e] = d[e];
}
extern "C" __global__ void __launch_bounds__(128) pipelined(float *y, const unsigned *x, u64 b, int n) {
    body<false>(y, x, b, n);
}
extern "C" __global__ void __launch_bounds__(128) touched(float *y, const unsigned *x, u64 b, int n) {
    body<true>(y, x, b, n);
}
"""


def test_the_report_parser_reads_a_serialised_wgmma_pipeline(tmp_path: Path) -> None:
    """ptxas names the kernels whose wgmma it had to serialise (one group in flight at a time): the census
    reports them, so a variant that would lose its overlap is caught without a GPU."""
    from workers.harness.cuda_compile import compile_cubin
    from workers.harness.nvrtc_census import PTXAS_VERBOSE

    source = tmp_path / "w.cu"
    source.write_text(WGMMA_SOURCE)
    result = compile_cubin(
        source, tmp_path / "art", "w", ["--gpu-architecture=sm_90a", PTXAS_VERBOSE], ["pipelined", "touched"]
    )
    assert result.ok, result.log
    report = parse_ptxas_report(result.log)
    assert report["touched"].wgmma_serialized and not report["pipelined"].wgmma_serialized


STARVED_SOURCE = r"""
typedef unsigned long long u64;
extern "C" __global__ void __launch_bounds__(640, 1) starved(float *y, const unsigned *x, u64 b, int n) {
    float d[64];
    for (int e = 0; e < 64; ++e) d[e] = 0.f;
    int i = 0;
    do {
        unsigned a[4] = {x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]};
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {ACC}, {%64, %65, %66, %67}, %68, "
                     "p, 1, 1, 0;\n}\n"
                     : OUTS : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    } while (++i < n);
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    for (int e = 0; e < 64; ++e) y[64 * threadIdx.x + e] = d[e];
}
"""


def test_the_report_parser_reads_a_wgmma_serialised_for_want_of_registers(tmp_path: Path) -> None:
    """64 accumulators of m64n128k16 in a 640-thread kernel (96 registers): ptxas serialises its wgmma for
    want of registers (C7512), a note that ends "for the function", not "in the function" (E2's WIDE tile
    drew it without setmaxnreg, and the census had read it as clean)."""
    from workers.harness.cuda_compile import compile_cubin
    from workers.harness.nvrtc_census import PTXAS_VERBOSE

    source = tmp_path / "s.cu"
    acc = ", ".join(f"%{i}" for i in range(64))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(64))
    source.write_text(STARVED_SOURCE.replace("ACC", acc).replace("OUTS", outs))
    options = ["--gpu-architecture=sm_90a", PTXAS_VERBOSE]
    result = compile_cubin(source, tmp_path / "art", "s", options, ["starved"])
    assert result.ok, result.log
    assert "C7512" in result.log, result.log
    assert parse_ptxas_report(result.log)["starved"].wgmma_serialized


# make test: the prefill variants the GPU tests run, for the format with the most registers per variant
# (Q4_K: 3 meta words); the rest with `make test-full`. The whole decode space of one format is ~200 NVRTC
# seconds on 2 cores (2026-12-02): test-full only; make test compiles it in test_compile_matrix.py
QUICK = ("Q4_K",)


def _quick(formats: Iterable[str], keep: tuple[str, ...]) -> list[object]:
    return [f if f in keep else pytest.param(f, marks=pytest.mark.slow) for f in formats]


@pytest.mark.parametrize("fmt", _quick(DECODE.manifest.formats, ()))
def test_decode_space_does_not_spill(fmt: str, tmp_path: Path) -> None:
    names = _kept(DECODE, fmt, (v.name for v in DECODE.space("cuda")))
    table = census(DECODE, fmt, names, tmp_path)
    assert set(table) == set(names)
    spilling = {name: row for name, row in table.items() if row["spills"]}
    assert not spilling, spilling


@pytest.mark.parametrize("fmt", _quick(PREFILL.manifest.formats, QUICK))
def test_prefill_variants_the_device_runs_do_not_spill(fmt: str, tmp_path: Path) -> None:
    _, prefill = _gpu_test_variants()
    names = _kept(PREFILL, fmt, prefill)
    assert all(any(n.endswith(e) for n in names) for e in ("/E0", "/E1", "/E2"))
    table = census(PREFILL, fmt, names, tmp_path)
    spilling = {name: row for name, row in table.items() if row["spills"]}
    assert not spilling, spilling
    serialized = sorted(name for name, row in table.items() if row["wgmma_serialized"])
    assert not serialized, serialized  # the wgmma engines keep their groups in flight


@pytest.mark.slow
@pytest.mark.parametrize("fmt", PREFILL.manifest.formats)
def test_whole_prefill_space_does_not_spill(fmt: str, tmp_path: Path) -> None:
    names = _kept(PREFILL, fmt, (v.name for v in PREFILL.space("cuda")))
    table = census(PREFILL, fmt, names, tmp_path)
    spilling = {name: row for name, row in table.items() if row["spills"]}
    assert not spilling, spilling
