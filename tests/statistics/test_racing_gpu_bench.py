"""bench/racing_gpu.py on the host backend: record exhaustive dispatches, then replay racing on them.

The same record/replay path the H200 recording took (one pinned process per device, problems built
ahead in CPU processes, whole points only at the deadline), on the C kernels so it runs anywhere.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = str(REPO / "bench/racing_gpu.py")


def test_split_units_balances_by_size_and_keeps_formats_in_order() -> None:
    sys.path.insert(0, str(REPO / "bench"))
    import racing_gpu

    units = [("Q4_0", "big", 4096, 4096), ("Q4_0", "a", 256, 256), ("Q4_0", "b", 512, 512),
             ("Q4_K", "big", 4096, 4096)]  # fmt: skip
    shares = racing_gpu.split_units(units, 2)
    assert sorted(u for share in shares for u in share) == sorted(units)
    assert [u[1] for u in shares[0] if u[0] == "Q4_0"] == ["big"]  # the big one alone, the rest beside
    assert all(share.index(u) < share.index(v) for share in shares for u in share for v in share
               if u[0] == "Q4_0" and v[0] == "Q4_K")  # fmt: skip
    assert len(racing_gpu.shape_list("qwen36+grid")) == 42
    dense = racing_gpu.shape_list("qwen36+grid+mid")
    assert len(dense) == len({(n, k) for _, n, k in dense}) == 110
    assert {(n, k) for _, n, k in racing_gpu.shape_list("qwen36+grid")} < {(n, k) for _, n, k in dense}
    assert all(k % 256 == 0 for _, _, k in dense)


def test_record_on_host_then_replay(tmp_path: Path) -> None:
    recording = tmp_path / "rec.json.gz"
    record = [sys.executable, SCRIPT, "record", "--arch", "host", "--gpus", "0", "--shapes", "smoke",
              "--formats", "Q4_0", "--m", "1", "--dispatches", "30", "--builders", "1",
              "--out", str(recording)]  # fmt: skip
    proc = subprocess.run(record, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with gzip.open(recording, "rt") as fh:
        payload = json.load(fh)
    assert payload["child_exit_codes"] == [0] and len(payload["points"]) == 3
    for point in payload["points"]:
        assert point["eligible"] and all(len(t) == 30 for t in point["times_ns"].values())
        assert set(point["order"]) == set(point["times_ns"])
    report_path = tmp_path / "replay.json"
    replay = [sys.executable, SCRIPT, "replay", "--recording", str(recording), "--max-dispatches", "30",
              "--min-dispatches", "10", "--rotations", "2", "--out", str(report_path)]  # fmt: skip
    proc = subprocess.run(replay, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(report_path.read_text())
    block = report["current"]
    assert report["points"] == 3 and block["dispatch_reduction"] >= 1.0
    assert block["summary"]["exhaustive_dispatches"] == sum(
        len(t) for p in payload["points"] for t in p["times_ns"].values()
    )
    assert "agreement_decided" in block and "rotated_replays" in block


def test_pruned_variants_keep_near_winners_per_m_and_the_untimed_kernels_of_the_right_mx(
    tmp_path: Path,
) -> None:
    """--prune-from: per M the variants within the fraction of some point's best (parity-passing only, the
    other format ignored), plus those the earlier recording never timed whose mx is the smallest >= M."""
    sys.path.insert(0, str(REPO / "bench"))
    import racing_gpu

    def point(fmt: str, m: int, times: dict[str, int], eligible: list[str]) -> dict[str, object]:
        return {
            "format": fmt,
            "m": m,
            "times_ns": {v: [t] * 3 for v, t in times.items()},
            "eligible": eligible,
        }

    points = [
        point("Q4_0", 1, {"A": 1000, "B": 1005, "C": 1100, "D": 900}, ["A", "B", "C"]),  # D failed parity
        point("Q4_0", 1, {"A": 1200, "C": 1000}, ["A", "C"]),
        point("Q4_0", 2, {"A": 1000, "B": 2000}, ["A", "B"]),
        point("Q4_K", 2, {"B": 1000, "A": 2000}, ["A", "B"]),  # another format: ignored
    ]
    recording = tmp_path / "rec.json.gz"
    with gzip.open(recording, "wt") as fh:
        json.dump({"points": points}, fh)
    space = [("A", 1), ("B", 1), ("C", 1), ("D", 1), ("N1", 1), ("N2", 2), ("N4", 4)]
    tight = racing_gpu.pruned_variants(recording, ["Q4_0"], [1, 2], space, 0.0)
    assert tight == {1: ["A", "C", "N1"], 2: ["A", "N2"]}
    loose = racing_gpu.pruned_variants(recording, ["Q4_0"], [1, 2], space, 0.01)
    assert loose[1] == ["A", "B", "C", "N1"]
    with pytest.raises(SystemExit, match="no Q4_0 point at M = 3"):
        racing_gpu.pruned_variants(recording, ["Q4_0"], [3], space, 0.0)


def test_timed_summary_says_when_every_variant_failed() -> None:
    """record exits 3 when no point timed any variant: the 2026-12-01 dense recording (a merge-broken
    decode.hip, package 99613669) holds 440 points and 0 timings; its summary line said "440 points"."""
    sys.path.insert(0, str(REPO / "bench"))
    import racing_gpu

    failed = {"times_ns": {"A": [], "B": []}, "errors": {"A": "compile failed: x", "B": "compile failed: x"}}
    ok = {"times_ns": {"A": [5, 6], "B": []}, "errors": {"B": "(cached NVRTC rejection) compile failed: x"}}
    assert racing_gpu.timed_summary([failed, ok]) == {
        "timed_points": 1, "variant_errors": 3, "commonest_error": "compile failed: x"
    }  # fmt: skip
    with gzip.open(REPO / "bench/results/loso-dense-recording-h200-2026-12-01-dense.json.gz", "rt") as fh:
        dense = json.load(fh)
    summary = racing_gpu.timed_summary(dense["points"])
    assert len(dense["points"]) == 440 and summary["timed_points"] == 0
    assert summary["commonest_error"].startswith("compile failed")
