"""CUDA backend on a real sm_90 GPU, through the one runner: parity of every built-in decode and prefill
variant for every first-wave format, clocks, resources, NaN poisoning, and packages that are not built in.

Run on the H200 machine with ``pytest -m gpu tests/cuda``; CI (no GPU, no cuda-python) skips them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from kernels.formats.registry import FORMATS
from kernels.packages.loader import builtin_packages, load_folder
from kernels.packages.package import DeviceFacts
from workers.backends.base import TaskSpec
from workers.backends.cuda import CudaBackend
from workers.harness import cuda_driver as cd

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cd.available(), reason="cuda-python is not installed"),
]

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "cuda" / "fixture-decode"
EXAMPLE = REPO / "docs" / "examples" / "rowsplit-gemv"
DECODE = builtin_packages()["tb-decode"]
PREFILL = builtin_packages()["tb-prefill"]
VARIANTS = tuple(v.name for v in DECODE.space("cuda"))
# the whole prefill space (242 cuda variants): too many NVRTC compiles per format for a test; each axis value
PREFILL_VARIANTS = (
    "N64/M64/W2x2/K4/S3/SK1/MB1/E0",
    "N128/M64/W4x2/K4/S3/SK2/MB1/E0",
    "N128/M128/W2x4/K4/S3/SK1/MB1/E0",
    "N256/M64/W4x2/K4/S4/SK4/MB1/E0",
    "N128/M32/W4x1/K8/S3/SK1/MB1/E0",
    "N64/M128/W2x4/K4/S4/SK2/MB1/E0",
    "N128/M64/W4x2/K4/S3/SK1/MB2/E0",  # two workgroups per SM: not for Q4_K / Q6_K (ptxas spills there)
    # the wgmma engine (sm_90a): 1, 2 and 4 warpgroups, kb 4 / 8, split-K 1 / 2 / 4
    *("N64/M64/W4x1/K4/S3/SK1/MB1/E1", "N128/M128/W4x2/K4/S3/SK2/MB1/E1", "N256/M64/W4x4/K4/S3/SK4/MB1/E1"),
    *("N64/M128/W4x1/K4/S4/SK1/MB1/E1", "N64/M64/W4x1/K8/S3/SK2/MB1/E1"),
    # the warp-specialised wgmma engine: 1 / 2 / 4 consumers of 1 / 2 m64 tiles, 3 / 4 stages, split-K 1 / 2
    *("N256/M64/W4x4/K4/S3/SK1/MB1/E2", "N128/M128/W4x1/K4/S4/SK2/MB1/E2", "N256/M64/W4x2/K4/S4/SK2/MB1/E2"),
    *("N64/M128/W4x1/K4/S3/SK1/MB1/E2", "N128/M128/W4x2/K4/S4/SK1/MB1/E2"),
    "N256/M64/W4x2/K4/S4/SK0/MB1/E2",  # stream-K: one workgroup per SM, pieces of tiles added into y
    "N256/M128/W4x4/K4/S3/SK0/MB1/E2",  # WIDE: four consumers of m64 x 128 tokens under setmaxnreg
    "N256/M128/W4x4/K4/S3/SK1/MB1/E3",  # WIDE in 2-CTA clusters: the activation tile multicast (TMA bulk)
)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CudaBackend:
    # TUNEBASE_CUDA_ARTIFACTS: an NVRTC cache warmed in parallel beforehand (bench/device_k2.sh); the cubins
    # are content-addressed, so a warm cache changes nothing but the compile time
    warm = os.environ.get("TUNEBASE_CUDA_ARTIFACTS")
    be = CudaBackend(Path(warm) if warm else tmp_path_factory.mktemp("cuda-artifacts"))
    if be.detect() is None:
        pytest.skip("no sm_90 GPU")
    return be


H200 = DeviceFacts("cuda", "sm_90", 132, 32)  # the point rules as the H200 answers them


def spec(fmt: str, n: int, k: int, m: int, **kw: object) -> TaskSpec:
    phase = str(kw.pop("phase", "decode"))
    args: dict[str, object] = {
        "variants": VARIANTS if phase == "decode" else PREFILL_VARIANTS,
        "min_dispatches": 3,
        "warmup": 1,
    }
    args.update(kw)
    return TaskSpec(arch="sm_90", phase=phase, format=fmt, shape="t", n=n, k=k, m=m, **args)  # type: ignore[arg-type]


def _all_pass(result: object, expected: tuple[str, ...], dispatches: int = 3, m: int = 1) -> None:
    assert result.artifact.ok, result.artifact.log  # type: ignore[attr-defined]
    assert [r.variant for r in result.results] == list(expected)  # type: ignore[attr-defined]
    ran = 0
    for r in result.results:  # type: ignore[attr-defined]
        if int(r.variant.split("/")[0][2:]) < m:  # compiled for M <= MX: its point rule removes it
            assert r.error is not None and "m <= mx" in r.error, (r.variant, r.error)
            continue
        ran += 1
        assert r.error is None, (r.variant, r.error)
        assert r.parity is not None and r.parity.passed, (r.variant, r.parity)
        assert len(r.dispatches) == dispatches
        assert all(d.device_ns > 0 and d.wall_ns >= d.device_ns for d in r.dispatches)
        assert all(d.event_ns is not None and d.event_ns > 0 for d in r.dispatches)
        res = result.artifact.resources[r.symbol]  # type: ignore[attr-defined]
        assert int(res["registers"]) > 0 and int(res["local_bytes"]) == 0  # no spills on sm_90
        assert 0 < float(res["occupancy"]) <= 1
    assert ran > 0


def _decode_kept(fmt: str, n: int, k: int, m: int) -> tuple[str, ...]:
    """The decode variants whose point rules hold at (n, k, m) on the H200, except that M > MX is kept (the
    runner must refuse it with its reason); e.g. RG16's split-K needs K % 1024 == 0, and its persistent grids
    with two row tiles per warp need their shared memory twice per SM."""
    guard = "backend == 'host' or m <= mx"

    def problems(name: str) -> set[str]:
        values = DECODE.bindings(DECODE.parse(name, "cuda"), n, k, m, FORMATS[fmt], H200)
        return set(DECODE.point_problems(values))

    return tuple(name for name in VARIANTS if problems(name) <= {guard})


@pytest.mark.parametrize("fmt", DECODE.manifest.formats)
@pytest.mark.parametrize("m", [1, 3])
def test_every_decode_variant_passes_parity_and_is_timed(backend: CudaBackend, fmt: str, m: int) -> None:
    # n = 1000: not a multiple of any tile, so tails are exercised; K = 768 covers 256-weight super-blocks
    # and leaves empty K slices at kb = 4 (3 super-blocks); m = 3 runs the M guard of the MX4 kernels
    kept = _decode_kept(fmt, 1000, 768, m)
    # what the point rules hold out here, and only that: RG16 KB4 (K % 1024 != 0), the flat kernel (PP6: whole
    # 32-chunk stages, K % 1024 == 0; test_decode_at_model_k_with_split_k runs it) and, for Q6_K, the RG16
    # persistent grids whose pg blocks' shared memory does not fit an SM (a count here went stale)
    allowed = {"rg != 16 or k % (256 * kb) == 0", "pp < 2 or pg == 0 or pg * (smem + 1024) <= 233472"}
    allowed |= {"pp != 6 or k % 1024 == 0", "backend == 'host' or m <= mx"}  # + the runner's M guard
    # the RG16 K phases: whole stages per phase (K = 768 has 3) and the pairs that spill under NVRTC (any K)
    allowed |= {
        "pp not in (10, 11, 12, 13, 14, 15) or k % (256 * tc_phases) == 0",
        "pp not in (10, 11, 12, 13, 14, 15) or rw == 1 or mx != 2 or format != 'Q5_1'",
        "pp not in (10, 11, 12, 13, 14, 15) or pg != 3 or format != 'Q6_K'",
        "pp not in (10, 11, 12, 13, 14, 15) or pg != 3 or mx != 8 or format != 'Q4_K' or pp != 10",
        "pp != 13 or rw == 1 or format != 'Q6_K'",
        "rg != 16 or kb == 1 or rw == 1 or format != 'Q6_K'",  # Q6_K split-K RW2 spills (any K)
    }
    for name in set(VARIANTS) - set(kept):
        values = DECODE.bindings(DECODE.parse(name, "cuda"), 1000, 768, m, FORMATS[fmt], H200)
        assert set(DECODE.point_problems(values)) <= allowed, (name, DECODE.point_problems(values))
    dp4a = [name for name in VARIANTS if "/RG16/" not in name and not name.endswith("/PP6")]
    assert set(dp4a) <= set(kept)
    _all_pass(backend.run_task(spec(fmt, 1000, 768, m, variants=kept)), kept, m=m)


@pytest.mark.parametrize("fmt", ["Q4_0", "Q4_K", "IQ4_XS", "Q6_K"])
def test_decode_at_model_k_with_split_k(backend: CudaBackend, fmt: str) -> None:
    """K = 5120 (the qwen36 hidden size): several chunks per lane, slices of whole super-blocks."""
    kept = _decode_kept(fmt, 2051, 5120, 1)
    assert sum("/RG16/" in name for name in kept) >= 18
    assert sum(name.endswith("/PP6") for name in kept) == 4  # the flat kernel runs here (K % 1024 == 0)
    assert sum(name.endswith(("/PP7", "/PP8")) for name in kept) == 7  # and the interleaved ring
    _all_pass(backend.run_task(spec(fmt, 2051, 5120, 1, variants=kept)), kept)


PER_LAUNCH = tuple(v.name for v in DECODE.space("cuda") if DECODE.has_prelaunch(v, "cuda"))


@pytest.mark.parametrize("fmt", DECODE.manifest.formats)
@pytest.mark.parametrize("m", [1, 3])
def test_decode_with_x_quantised_per_launch(backend: CudaBackend, fmt: str, m: int) -> None:
    """PP 13-17 (the prelaunch kernel tb_decode_prep_rg*, then the variant copying x's image) at K = 5120
    (whole K phases), every format: each dispatch is two launches and its parity is the pair's output."""
    kept = _decode_kept(fmt, 1000, 5120, m)
    mine = tuple(name for name in PER_LAUNCH if name in kept)
    assert len(mine) >= 20, (fmt, len(mine))
    result = backend.run_task(spec(fmt, 1000, 5120, m, variants=mine))
    _all_pass(result, mine, m=m)
    assert all("prelaunch" in result.artifact.resources[r.symbol] for r in result.results if r.error is None)


@pytest.mark.parametrize("fmt", PREFILL.manifest.formats)  # the 9 first-wave formats, Q5_1 included
@pytest.mark.parametrize("m", [200])
def test_every_prefill_variant_passes_parity_and_is_timed(backend: CudaBackend, fmt: str, m: int) -> None:
    # n = 1000, m = 200: tails in both tile directions; K = 1024: 4 stages of 8 blocks (split-K 4 x kb 8).
    # The variants a format's point rules keep (the no-spill rules name formats: MB2 is none of the K-quants')
    h200 = DeviceFacts("cuda", "sm_90", 132, 32)
    kept = tuple(
        name
        for name in PREFILL_VARIANTS
        if not PREFILL.point_problems(
            PREFILL.bindings(PREFILL.parse(name, "cuda"), 1000, 1024, m, FORMATS[fmt], h200)
        )
    )
    assert len(kept) >= len(PREFILL_VARIANTS) - 3
    assert all(any(v.endswith(e) for v in kept) for e in ("/E1", "/E2"))
    result = backend.run_task(spec(fmt, 1000, 1024, m, phase="prefill", variants=kept))
    _all_pass(result, kept)
    for r in result.results:  # the prelaunch kernel (activation quantisation) ran, and its resources are kept
        res: dict[str, Any] = result.artifact.resources[r.symbol]
        assert res["prelaunch"]["block"] == [256, 1, 1] and int(res["prelaunch"]["registers"]) > 0
        assert int(res["shared_dynamic_bytes"]) > 0, (r.variant, res)
        if r.variant.endswith("/E3"):  # 2-CTA clusters: occupancy from cuOccupancyMaxActiveClusters
            assert res["cluster_size"] == 2 and int(res["clusters_max_active"]) >= 1, (r.variant, res)
            assert int(res["blocks_per_sm"]) >= 1 and "occupancy_error" not in res, (r.variant, res)
        else:
            assert "cluster_size" not in res and int(res["blocks_per_sm"]) >= 1, (r.variant, res)


def test_prefill_dispatch_time_is_both_kernels(backend: CudaBackend) -> None:
    """CUPTI sees two kernels per prefill dispatch (prelaunch + GEMM); device_ns is their sum, which the
    event pair around both launches brackets."""
    from workers.profilers import cupti

    if not cupti.available():
        pytest.skip(cupti.IMPORT_ERROR)
    result = backend.run_task(
        spec("Q4_0", 4096, 4096, 512, phase="prefill", variants=PREFILL_VARIANTS[:2], min_dispatches=5)
    )
    for r in result.results:
        assert r.error is None and r.parity is not None and r.parity.passed, (r.variant, r.error, r.parity)
        assert result.artifact.resources[r.symbol]["device_clock"] == "cupti"
        assert sum(d.event_ns or 0 for d in r.dispatches) >= sum(d.device_ns for d in r.dispatches) * 0.9


def test_device_time_comes_from_cupti_beside_events(backend: CudaBackend) -> None:
    from workers.profilers import cupti

    if not cupti.available():
        pytest.skip(cupti.IMPORT_ERROR)
    result = backend.run_task(
        spec(
            "Q4_0",
            4096,
            4096,
            1,
            variants=("MX1/KB1/RW1/U8/RG1/PG0/PP0", "MX1/KB4/RW1/U4/RG1/PG0/PP1"),
            min_dispatches=10,
        )
    )
    for r in result.results:
        assert result.artifact.resources[r.symbol]["device_clock"] == "cupti"
        # the event pair brackets the kernel, so it can only read longer (0.5 us event resolution)
        assert sum(d.event_ns or 0 for d in r.dispatches) >= sum(d.device_ns for d in r.dispatches) * 0.9
        assert [d.seq for d in r.dispatches] == sorted(d.seq for d in r.dispatches)


def test_large_shape_rotates_weights_beyond_l2_and_samples_parity(backend: CudaBackend) -> None:
    result = backend.run_task(
        spec(
            "Q8_0",
            17408,
            5120,
            2,
            variants=("MX4/KB1/RW2/U4/RG1/PG2/PP0", "MX4/KB4/RW2/U2/RG1/PG0/PP1"),
            min_dispatches=4,
        )
    )
    assert result.weight_copies >= 2  # 95 MB per copy (Q8_0 true bytes) vs a 50-60 MB L2: 2 copies
    for r in result.results:
        assert r.parity is not None and r.parity.passed and r.parity.sampled_rows == 512
        assert {d.buffer_index for d in r.dispatches} == set(range(result.weight_copies))


def test_fixture_package_in_template_form_passes(backend: CudaBackend) -> None:
    result = backend.run_task(
        spec(
            "Q4_0",
            300,
            512,
            3,
            variants=("KB2/TW8", "KB4/TW24"),
            kernel_root=str(FIXTURE),
            kernel="fixture-decode",
        )
    )
    assert all(r.parity is not None and r.parity.passed for r in result.results), result.results
    assert all("tb_decode" in r.symbol and r.symbol.startswith("_Z") for r in result.results)  # lowered names


def test_kernel_that_skips_a_row_fails_parity(backend: CudaBackend, tmp_path: Path) -> None:
    folder = tmp_path / "fixture-decode"
    shutil.copytree(FIXTURE, folder)
    source = folder / "decode.hip"
    text = source.read_text()
    source.write_text(text.replace("row < n;", "row < n - 1;"))
    assert source.read_text() != text
    result = backend.run_task(
        spec("Q4_0", 512, 256, 1, variants=("KB1/TW8",), kernel_root=str(folder), kernel="fixture-decode")
    )
    parity = result.results[0].parity
    assert parity is not None and not parity.passed  # the untouched NaN row fails it


def test_cubin_is_cached_and_resources_include_sass(backend: CudaBackend) -> None:
    variants = [DECODE.parse("MX1/KB1/RW1/U4/RG1/PG0/PP0", "cuda")]
    first = backend.build(DECODE, "Q8_0", variants)
    second = backend.build(DECODE, "Q8_0", variants)
    assert first.artifact.ok and not second.artifact.compiled
    assert first.artifact.cache_key == second.artifact.cache_key
    result = backend.run_task(spec("Q8_0", 256, 256, 1, variants=("MX1/KB1/RW1/U4/RG1/PG0/PP0",)))
    res = result.artifact.resources[result.results[0].symbol]
    if "sass" in res:
        sass = res["sass"]
        assert isinstance(sass, dict) and sass["instructions"] > 0


@pytest.mark.skipif(not EXAMPLE.is_dir(), reason="docs/examples/rowsplit-gemv not present")
@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_example_package_reading_raw_gguf_blocks_runs(backend: CudaBackend, fmt: str) -> None:
    example = load_folder(EXAMPLE)
    names = tuple(v.name for v in example.space("cuda"))
    result = backend.run_task(
        spec(fmt, 1000, 1024, 2, variants=names, kernel_root=str(EXAMPLE), kernel=example.name)
    )
    for r in result.results:
        if r.error and r.error.startswith("restriction fails"):
            continue  # a point-level rule of the package (e.g. over n, k, m) removed it here
        assert r.error is None, (r.variant, r.error)
        assert r.parity is not None and r.parity.passed, (r.variant, r.parity)
        assert len(r.dispatches) == 3
