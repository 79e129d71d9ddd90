"""tb-mxfp4-gemm on a real sm_90 GPU through the one runner: every CUDA variant against the gguf reference
(prepare kernel, >48 KiB dynamic shared memory, partial M tiles), timed by CUPTI.

Run on the H200 with ``pytest -m gpu tests/cuda/test_mxfp4_gemm_gpu.py``; set TB_MXFP4_ARTIFACTS to share
the NVRTC cache with bench/mxfp4_gemm.py. CI (no GPU) skips it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernels.packages.loader import builtin_packages
from workers.backends.base import TaskSpec
from workers.backends.cuda import CudaBackend
from workers.harness import cuda_driver as cd

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cd.available(), reason="cuda-python is not installed"),
]

PACKAGE = builtin_packages()["tb-mxfp4-gemm"]
VARIANTS = tuple(v.name for v in PACKAGE.space("cuda"))


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CudaBackend:
    shared = os.environ.get("TB_MXFP4_ARTIFACTS")
    be = CudaBackend(Path(shared) if shared else tmp_path_factory.mktemp("mxfp4-artifacts"))
    if be.detect() is None:
        pytest.skip("no sm_90 GPU")
    return be


@pytest.mark.parametrize(("n", "k", "m"), [(512, 1024, 100), (256, 512, 3), (1024, 2048, 300)])
def test_every_cuda_variant_passes_parity_and_is_timed(backend: CudaBackend, n: int, k: int, m: int) -> None:
    spec = TaskSpec(
        arch="sm_90", phase="prefill", format="MXFP4", shape="t", n=n, k=k, m=m, variants=VARIANTS,
        min_dispatches=3, warmup=1, kernel="tb-mxfp4-gemm",
    )  # fmt: skip
    result = backend.run_task(spec)
    assert result.artifact.ok, result.artifact.log
    assert [r.variant for r in result.results] == list(VARIANTS)
    for r in result.results:
        assert r.error is None, (r.variant, r.error)
        assert r.parity is not None and r.parity.passed, (r.variant, r.parity)
        assert r.parity.rel_l2 < 5e-3, (r.variant, r.parity)  # bf16 x, exact weights: ~1.7e-3
        assert len(r.dispatches) == 3 and all(d.device_ns > 0 for d in r.dispatches)
        res = result.artifact.resources[r.symbol]
        assert res["local_bytes"] == 0 and int(str(res["registers"])) <= 255, (r.variant, res)
        assert res["device_clock"] == "cupti", (r.variant, res)
    shared = [result.artifact.resources[r.symbol]["shared_dynamic_bytes"] for r in result.results]
    assert max(int(str(b)) for b in shared) > 48 << 10  # the >48 KiB opt-in was exercised
