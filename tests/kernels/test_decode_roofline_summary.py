"""bench/decode_roofline.py's summary arithmetic (issue 13's targets) on hand-made rows: faster count, the
slower points, geomean, median fraction of copy bandwidth, LM head M4 / M1."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("decode_roofline", REPO / "bench" / "decode_roofline.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _row(fmt: str, shape: tuple[str, int, int], m: int, us: float | None) -> dict[str, Any]:
    row: dict[str, Any] = {"format": fmt, "shape": shape[0], "n": shape[1], "k": shape[2], "m": m}
    if us is not None:
        row["median_us"] = us
    return row


def test_summary_counts_ratios_and_bandwidth() -> None:
    lm, gu = bench.LM_HEAD, bench.GATE_UP
    rows = [
        _row("Q4_0", lm, 1, 159.7),  # llama 319.4 -> 2.0x
        _row("Q4_0", lm, 4, 203.6),  # llama 407.2 -> 2.0x; M4 / M1 = 1.275
        _row("Q4_0", gu, 1, 50.8),  # llama 25.4 -> 0.5x
        _row("Q4_0", gu, 2, None),  # no passing variant: no ratio, not compared
        _row("Q4_0", ("Qwen36_GDN_ZProjection", 6144, 5120), 1, 10.0),  # no llama.cpp number
    ]
    copy = {"bandwidth_gbs": 4000.0}
    s = bench.summarize(rows, copy)
    assert s["points_compared"] == 3 and s["faster_than_llama_cpp"] == 2
    assert [(r["shape"], r["m"]) for r in s["slower_than_llama_cpp"]] == [(gu[0], 1)]
    assert math.isclose(s["geomean_ratio"], (2.0 * 2.0 * 0.5) ** (1 / 3))
    assert math.isclose(s["lm_head_m4_over_m1"]["Q4_0"], 203.6 / 159.7)
    assert s["q4_0_lm_head_m1_us"] == 159.7 and s["q4_0_gateup_m1_us"] == 50.8
    # each row carries its true bytes, its fraction of the copy bandwidth and the llama.cpp constant
    z = rows[4]
    assert z["bytes"] == bench.true_bytes("Q4_0", 6144, 5120, 1) and "ratio" not in z
    assert math.isclose(z["fraction_of_copy"], z["bytes"] / (10.0 * 1e3) / 4000.0)
    assert rows[0]["llama_us"] == 319.4 and "fraction_of_copy" not in rows[3]
    fractions = sorted(r["fraction_of_copy"] for r in rows if r["m"] == 1 and "fraction_of_copy" in r)
    assert s["shapes_in_median"] == 3 and s["median_fraction_m1_q4_0"] == fractions[1]


def test_variant_selection() -> None:
    """--variants: names and the keywords 'ring' / 'registers' / 'tc' / 'stream' / 'iw' pick from the CUDA
    space, in order."""
    every = bench.select_variants("")
    ring = bench.select_variants("ring")
    # 147 (was 136): k3m's 4 points of the PP6 flat kernel and k3i's 7 interleaved ring points (PP 7, 8);
    # 157: k3j's 4 MX4 RG16 split-K points (KB5 RW1 PP2 / PP3, KB4 / KB5 RW2 PP2), k3q's 6 PP9 points (the
    # stream kernel with split waits); 174: the RG16 K phases (PP 10 / 11 / 12); 209: x quantised once per
    # launch (PP 13-17); 210: PP16 MX4/RW2 PG2; 217: PP18 / 19
    assert len(every) == 217 and len(ring) == 36 and all(name.endswith(("/PP2", "/PP3")) for name in ring)
    stream = bench.select_variants("stream")
    assert len(stream) == 8 and all(name.startswith("MX1/KB1/") and name.endswith("/PP5") for name in stream)
    flat = bench.select_variants("flat")
    assert len(flat) == 4 and all(name.startswith("MX1/KB1/RW1/") and name.endswith("/PP6") for name in flat)
    iw = bench.select_variants("iw")  # the interleaved ring (PP 7, 8)
    assert len(iw) == 7 and all(name.endswith(("/PP7", "/PP8")) for name in iw) and not set(iw) & set(ring)
    assert len(bench.select_variants("registers")) == 68
    tc = bench.select_variants("tc")
    # 45: k3j's 4 split-K points, the 17 K-phase ones (PP 10 / 11 / 12); 61: + 16 with x per launch (PP 13-15)
    assert len(tc) == 61 and all("/RG16/" in name for name in tc) and not set(tc) & set(ring)
    picked = bench.select_variants("MX4/KB1/RW2/U2/RG1/PG3/PP2,MX1/KB1/RW1/U8/RG1/PG3/PP0")
    assert picked == ("MX1/KB1/RW1/U8/RG1/PG3/PP0", "MX4/KB1/RW2/U2/RG1/PG3/PP2")
    try:
        bench.select_variants("MX9/KB1")
    except ValueError as exc:
        assert "MX9/KB1" in str(exc)
    else:
        raise AssertionError("an unknown name must be refused")


def test_shape_filter_keeps_the_issue_points() -> None:
    """--shapes: the LM head and GateUp alone (a short A/B on the device), in the full run's order."""
    every = bench.points(["Q4_0", "Q8_0"], [1, 4])
    kept = bench.points(["Q4_0", "Q8_0"], [1, 4], frozenset({bench.LM_HEAD[0], bench.GATE_UP[0]}))
    assert len(every) == 8 + 10 and kept == every[:8]  # + the other 10 qwen36 shapes at M = 1
    assert {p[1] for p in kept} == {bench.LM_HEAD[0], bench.GATE_UP[0]}
    assert bench.points(["Q4_0"], [1], frozenset({"Nope"})) == []
