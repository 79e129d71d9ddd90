"""bench/prefill_roofline.py without a GPU: the issue-18 constants, the target arithmetic, the candidates."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernels.packages.loader import builtin_packages

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import prefill_roofline as bench


def test_constants_cover_the_18_points_of_issue_18() -> None:
    points = [(f, s, m) for (f, s), by_m in bench.MMQ_US.items() for m in by_m]
    assert len(points) == 18 and {f for f, _, _ in points} == {"Q4_0", "Q8_0", "Q4_K"}
    assert bench.MMQ_US[("Q4_0", "GateUp")][2048] == 1760.7 and bench.TORCH_FP16_US["QKV"][128] == 49.0
    assert "d99724f" in bench.PROVENANCE and "H200" in bench.PROVENANCE


def test_every_candidate_is_a_cuda_variant() -> None:
    package = builtin_packages()["tb-prefill"]
    for name in bench.CANDIDATES:
        package.parse(name, "cuda")
    assert any("/SK1/" in v for v in bench.CANDIDATES) and any("/SK4/" in v for v in bench.CANDIDATES)


def test_compare_computes_ratios_and_targets() -> None:
    name = bench.SHAPES["GateUp"][0]
    points = [
        {"format": "Q4_0", "short": "GateUp", "shape": name, "m": 128, "median_us": 60.0},
        {"format": "Q4_0", "short": "GateUp", "shape": name, "m": 2048, "median_us": 700.0},
        {"format": "Q8_0", "short": "GateUp", "shape": name, "m": 512, "median_us": 400.0},
    ]
    cublas = [
        {"shape": name, "m": 128, "median_us": 63.8, "tflops": 1.0},
        {"shape": name, "m": 2048, "median_us": 504.2, "tflops": 1.0},
    ]
    summary = bench.compare(points, cublas)
    assert points[0]["vs_mmq"] == pytest.approx(135.3 / 60.0) and points[0]["vs_cublas"] == pytest.approx(
        63.8 / 60
    )
    assert points[2]["vs_mmq"] == pytest.approx(466.4 / 400.0) and points[2]["vs_cublas"] is None
    # 135.3/60 and 1760.7/700 pass 1.5x, 466.4/400 does not; faster than cuBLAS at M=128; 700 > 1.25 * 504.2
    assert (summary["mmq_points"], summary["mmq_1p5x_met"]) == (3, 2)
    assert (summary["cublas_m128_points"], summary["cublas_m128_faster"]) == (1, 1)
    assert (summary["cublas_m2048_points"], summary["cublas_m2048_within_1p25x"]) == (1, 0)
