"""CUDA backend on a real sm_90 GPU: parity of every format x variant, clocks, resources, poisoning.

Run on the H200 machine with ``pytest -m gpu tests/cuda``; CI (no GPU, no cuda-python) skips them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels.families.decode import DecodeFamily
from workers.backends.base import TaskSpec
from workers.backends.cuda import CudaBackend
from workers.harness import cuda_driver as cd
from workers.harness.cuda_abi import FIXTURE_SOURCE, FixtureBinding

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cd.available(), reason="cuda-python is not installed"),
]

VARIANTS = tuple(v.name for v in DecodeFamily().space("cuda"))


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CudaBackend:
    be = CudaBackend(tmp_path_factory.mktemp("cuda-artifacts"))
    if be.detect() is None:
        pytest.skip("no sm_90 GPU")
    return be


def spec(fmt: str, n: int, k: int, m: int, **kw: object) -> TaskSpec:
    args: dict[str, object] = {"variants": VARIANTS, "min_dispatches": 3, "warmup": 1}
    args.update(kw)
    return TaskSpec(arch="sm_90", phase="decode", format=fmt, shape="t", n=n, k=k, m=m, **args)  # type: ignore[arg-type]


def first_wave() -> tuple[str, ...]:
    from kernels.formats.packing import FIRST_WAVE

    return FIRST_WAVE


@pytest.mark.parametrize("fmt", first_wave())
@pytest.mark.parametrize("m", [1, 4])
def test_every_variant_passes_parity_and_is_timed(backend: CudaBackend, fmt: str, m: int) -> None:
    # n = 1000: not a multiple of any tile, so tails are exercised; K = 768 covers 256-weight super-blocks
    result = backend.run_task(spec(fmt, 1000, 768, m))
    assert result.artifact.ok, result.artifact.log
    assert [r.variant for r in result.results] == list(VARIANTS)
    for r in result.results:
        assert r.error is None, (r.variant, r.error)
        assert r.parity is not None and r.parity.passed, (r.variant, r.parity)
        assert len(r.dispatches) == 3
        assert all(d.device_ns > 0 and d.wall_ns >= d.device_ns for d in r.dispatches)
        assert all(d.event_ns is not None and d.event_ns > 0 for d in r.dispatches)
        res = result.artifact.resources[r.symbol]
        assert int(res["registers"]) > 0  # type: ignore[call-overload]
        assert 0 < float(res["occupancy"]) <= 1  # type: ignore[arg-type]


def test_device_time_comes_from_cupti_beside_events(backend: CudaBackend) -> None:
    from workers.profilers import cupti

    if not cupti.available():
        pytest.skip(cupti.IMPORT_ERROR)
    result = backend.run_task(spec("Q4_0", 4096, 4096, 1, variants=("KB1/TW8", "KB4/TW8"), min_dispatches=10))
    for r in result.results:
        assert result.artifact.resources[r.symbol]["device_clock"] == "cupti"
        # the event pair brackets the kernel, so it can only read longer (0.5 us event resolution)
        assert sum(d.event_ns or 0 for d in r.dispatches) >= sum(d.device_ns for d in r.dispatches) * 0.9
        assert [d.seq for d in r.dispatches] == sorted(d.seq for d in r.dispatches)


def test_large_shape_rotates_weights_beyond_l2_and_samples_parity(backend: CudaBackend) -> None:
    result = backend.run_task(
        spec("Q8_0", 17408, 5120, 2, variants=("KB1/TW8", "KB2/TW12"), min_dispatches=4)
    )
    assert result.weight_copies >= 2  # 91 MB per copy, L2 is 60 MB: twice L2 needs 2 copies
    for r in result.results:
        assert r.parity is not None and r.parity.passed and r.parity.sampled_rows == 512
        assert {d.buffer_index for d in r.dispatches} == set(range(result.weight_copies))


def test_kernel_that_skips_a_row_fails_parity(backend: CudaBackend, tmp_path: Path) -> None:
    source = FIXTURE_SOURCE.read_text().replace("row < n;", "row < n - 1;")
    assert source != FIXTURE_SOURCE.read_text()
    path = tmp_path / "decode.hip"
    path.write_text(source)
    broken = CudaBackend(tmp_path / "artifacts", binding=FixtureBinding(path))
    result = broken.run_task(spec("Q4_0", 512, 256, 1, variants=("KB1/TW8",)))
    parity = result.results[0].parity
    assert parity is not None and not parity.passed  # the untouched NaN row fails it


def test_fixture_kernel_passes_too(tmp_path: Path) -> None:
    fixture = CudaBackend(tmp_path, binding=FixtureBinding())
    if fixture.detect() is None:
        pytest.skip("no sm_90 GPU")
    result = fixture.run_task(spec("Q4_K", 300, 512, 3, variants=("KB2/TW8", "KB4/TW24")))
    assert all(r.parity is not None and r.parity.passed for r in result.results), result.results


def test_cubin_is_cached_and_resources_include_sass(backend: CudaBackend) -> None:
    variants = [DecodeFamily().parse("KB1/TW4", "cuda")]
    first, _ = backend.build("Q8_0", variants)
    second, _ = backend.build("Q8_0", variants)
    assert first.ok and not second.compiled and first.cache_key == second.cache_key
    result = backend.run_task(spec("Q8_0", 256, 256, 1, variants=("KB1/TW4",)))
    res = result.artifact.resources[result.results[0].symbol]
    if "sass" in res:
        sass = res["sass"]
        assert isinstance(sass, dict) and sass["instructions"] > 0
