"""bench/loso_analysis.py on a small synthetic recording: the oracles bound what they claim to bound."""

from __future__ import annotations

import gzip
import itertools
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import loso_analysis  # noqa: E402

NS = (256, 512, 1024, 2048, 4096)
KS = (512, 2048, 8192)


def write_recording(path: Path) -> None:
    """A wins small N, B large N, C is 2.5% off the best everywhere; 20 dispatches with 0.5% jitter."""
    rng = np.random.default_rng(0)
    points = []
    for m in (1, 2):
        for n in NS:
            for k in KS:
                base = n * k / 1e3 + 2000
                med = {"A": base * (1 + 0.05 * np.log2(n / 256)), "B": base * (1 + 0.05 * np.log2(4096 / n))}
                med["C"] = min(med.values()) * 1.025
                times = {
                    v: [int(t * (1 + 0.005 * rng.standard_normal())) for _ in range(20)]
                    for v, t in med.items()
                }
                key = f"sm_90/decode/Q4_0/m{m}/{n}x{k}"
                points.append({"key": key, "shape": f"{n}x{k}", "times_ns": times, "eligible": sorted(times)})
    with gzip.open(path, "wt") as fh:
        json.dump({"points": points, "machine": {}}, fh)


def test_analysis_bounds_and_loso(tmp_path: Path) -> None:
    path = tmp_path / "rec.json.gz"
    write_recording(path)
    out = loso_analysis.analyse(path, "Q4_0")
    assert out["data"]["points"] == 30 and out["data"]["shapes"] == 15
    assert 0.0 < out["noise"]["dispatch_cv_median"] < 0.02
    for m in ("m1", "m2"):
        oracle = out["in_sample_oracles_per_m"][m]
        # one variant per work bucket can only do as well as or better than one variant for all shapes
        assert (
            oracle["one_variant_per_2_octave_work_bucket"]["mean"]
            <= oracle["best_single_variant_regret"]["mean"]
        )
        assert oracle["variants_covering_every_shape_within_3%"] == 1  # C is within 3% everywhere
    carry = out["what_the_neighbouring_shapes_carry"]
    means = [carry[f"best_of_{k}_nearest_shapes_winners"]["mean"] for k in loso_analysis.NEAREST]
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(means))  # more candidates: never worse
    loso = out["neighbours_policy_loso"]
    assert loso["all_points"]["points"] == 30
    assert loso["beyond_noise"]["mean"] <= loso["all_points"]["mean"] + 1e-12
    assert loso["all_points"]["max"] <= 0.2
    tree = loso["emitted_tree"]  # what the table answers at the held-out shape
    assert tree["all_points"]["points"] == 30 and tree["all_points"]["max"] <= 0.2


def test_a_recording_with_no_timed_point_is_named_so(tmp_path: Path) -> None:
    """Points recorded but none timed (every compile failed) is not the same error as no points."""
    import pytest

    path = tmp_path / "failed.json.gz"
    point = {"key": "sm_90/decode/Q4_0/m1/256x512", "shape": "256x512", "times_ns": {"A": []}, "eligible": [],
             "errors": {"A": "compile failed"}}  # fmt: skip
    with gzip.open(path, "wt") as fh:
        json.dump({"points": [point], "machine": {}}, fh)
    with pytest.raises(SystemExit, match="1 Q4_0 points recorded, none with a variant timed"):
        loso_analysis.analyse(path, "Q4_0")
    with pytest.raises(SystemExit, match="no Q4_K points"):
        loso_analysis.analyse(path, "Q4_K")
