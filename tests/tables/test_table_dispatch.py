"""Dispatch by the table: everything but the GPU launch (bench/table_dispatch.py).

The consumer program is generated from the package, its table trained without the held-out shapes of a
recording (here one with made-up times: the build's mechanics only), and nvcc compiles it; the judge is
checked on the program's output format. Timing it needs the H200 (bench/device_table_dispatch.sh, which
records the current package first).
"""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import table_dispatch  # noqa: E402

OLD = REPO / "bench" / "results" / "racing-gpu-h200x2-2026-11-30.json.gz"  # the KB/TW space before K1's
H200 = ["--sms", "132", "--llc-bytes", str(60 << 20)]
FAILS = "MX4/KB1/RW1/U4/RG1/PG0/PP1"  # made to fail parity in the made-up program output
SHAPES = ((4096, 2048), (1536, 1280), (10240, 5120), (512, 7168))


def made_up_recording(path: Path) -> Path:
    """An sm_90 recording of the CURRENT tb-decode space with MADE-UP times: it exercises the build (the
    table, the program, the data), never reported anywhere. Real data comes from bench/racing_gpu.py on
    the H200 (bench/device_table_dispatch.sh records first)."""
    from kernels.formats.registry import get_format
    from kernels.packages.loader import builtin_packages
    from kernels.packages.package import DeviceFacts

    package = builtin_packages()["tb-decode"]
    facts = DeviceFacts("cuda", "sm_90", 132, 32)
    points = []
    for m in (1, 2):
        for n, k in SHAPES:
            times: dict[str, list[int]] = {}
            for i, v in enumerate(package.space("cuda")):
                values = package.bindings(v, n, k, m, get_format("Q4_0"), facts)
                if package.point_problems(values):
                    times[v.name] = []  # as the recorder writes a variant a restriction excludes here
                    continue
                favoured = (i * 7 + n // 512 + k // 1024) % 13 == 0  # some shape-dependent winner
                times[v.name] = [
                    int(1000 * (n * k / 4e6 + 3) * (0.8 if favoured else 1.0 + 0.01 * (i % 9)))
                ] * 5
            points.append({"key": f"sm_90/decode/Q4_0/m{m}/{n}x{k}", "shape": f"S{n}x{k}", "times_ns": times,
                           "eligible": sorted(v for v, t in times.items() if t)})  # fmt: skip
    with gzip.open(path, "wt") as fh:
        json.dump({"machine": {"note": "made-up times for a build test"}, "points": points}, fh)
    return path


def build(tmp: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    data = made_up_recording(tmp / "recording.json.gz")
    code = table_dispatch.main(
        ["build", "--data", str(data), "--build-dir", str(tmp / "b"), "--every", "2", *H200, *extra]
    )
    assert code == 0
    return json.loads((tmp / "b" / "manifest.json").read_text())  # type: ignore[no-any-return]


def test_build_derives_table_program_and_data_from_the_package(tmp_path: Path) -> None:
    from kernels.formats.registry import get_format
    from kernels.packages.loader import builtin_packages

    manifest = build(tmp_path, "--no-compile")
    assert len(manifest["held_out_shapes"]) == 2 and len(manifest["train_shapes"]) == 2
    assert "replay reproduces" in " ".join(manifest["table"]["checks"])  # the table was validated
    assert manifest["programs"] == {"Q4_0": "consumer_Q4_0"}
    source = (tmp_path / "b" / "consumer_Q4_0.cu").read_text()
    package = builtin_packages()["tb-decode"]
    assert '#include "table.cuh"' in source
    for v in package.space("cuda"):  # one kernel pointer per variant symbol, in the package's order
        assert f"(const void *)&{package.symbol(v)}" in source
    assert "#define TB_DECODE_VARIANTS TB_DECODE_VARIANT(1,1,1,2,1,0,1)" in source
    held = {tuple(int(x) for x in s.split("x")) for s in manifest["held_out_shapes"]}
    for point in manifest["points"]:
        assert (point["n"], point["k"]) in held and point["table_variant"] is not None
        rows = point["tile_rows"]
        qs = tmp_path / "b" / "data" / f"{point['index']}_qs.bin"
        assert qs.stat().st_size == rows * point["row_bytes"]["qs"]
        assert point["row_bytes"]["qh"] == 0  # Q4_0 has no high bits: a null pointer
        assert point["weight_bytes"] == point["n"] * get_format("Q4_0").row_bytes(point["k"])  # true bytes


def test_launch_geometry_and_arguments_follow_the_manifest() -> None:
    from measured_data import RecordedPoint

    from kernels.packages.loader import builtin_packages
    from kernels.packages.package import DeviceFacts

    package = builtin_packages()["tb-decode"]
    point = RecordedPoint("sm_90", "decode", "Q4_K", 2, 4096, 2048, "S", {}, set())
    parts = ["qs", "qh", "sc"]
    launches, slots = table_dispatch.launch_table(
        package, point, DeviceFacts("cuda", "sm_90", 132, 32), parts
    )
    assert slots == 2 and [lt["variant"] for lt in launches] == [v.name for v in package.space("cuda")]
    assert not next(lt for lt in launches if lt["variant"].startswith("MX1/"))["ok"]  # m = 2 > mx = 1
    kb4 = next(lt for lt in launches if lt["ok"] and "/KB4/" in lt["variant"])
    params = package.parse(kb4["variant"], "cuda").params
    tiles = -(-4096 // (8 * params["rg"] * params["rw"]))
    assert kb4["grid"][1] == 4 and kb4["block"] == [256, 1, 1]
    assert kb4["workspace"] == [4 * 4 * 2 * 4096, 4 * tiles] and kb4["zero"] == [0, 1]
    kinds = [a[0] for a in kb4["args"]]
    assert kinds == [0] * 7 + [1] * 5  # qs, qh, sc, x, y, workspace, counters; m, n, k, tiles, grid_x
    assert [a[1] for a in kb4["args"][:7]] == [0, 1, 2, 3, 4, 5, 6]
    assert [a[2] for a in kb4["args"][7:11]] == [2, 4096, 2048, tiles]
    kb1 = next(lt for lt in launches if lt["ok"] and "/KB1/" in lt["variant"])
    assert [a[1] for a in kb1["args"][5:7]] == [-1, -1] and kb1["workspace"] == [0, 0]  # no split-K: null
    assert kb1["pre"] is None
    # x quantised once per launch (pp 13): the prelaunch kernel's geometry travels with the launch, and the
    # first workspace holds x's int8 image (40 bytes per 32-block and row of M), passed to both kernels
    xq = next(lt for lt in launches if lt["ok"] and lt["variant"].endswith("/PP13"))
    assert xq["pre"] == {
        "grid": [-(-2 * 2048 // 4 // 256), 1, 1], "block": [256, 1, 1], "shared": 0, "overlap": True,
    }  # fmt: skip
    assert xq["workspace"] == [40 * 2 * (2048 // 32), 0] and xq["args"][5][1] == 5


def fake_output(manifest: dict, table_slower: float = 1.01) -> list[dict]:  # type: ignore[type-arg]
    """The program's POINT lines as it prints them (made-up times: this checks the arithmetic only)."""
    lines = []
    for p in manifest["points"]:
        variants = {
            v: {"cosine": 0.99999, "rel_l2": 0.005, "passed": v != FAILS, "median_us": t,
                "times_us": [t, t * 1.001, t * 0.999]}
            for v, t in p["recorded_median_us"].items()
        }  # fmt: skip
        chosen = p["table_variant"]
        lines.append({
            "index": p["index"], "key": p["key"], "format": p["format"], "codebook": p["codebook"],
            "m": p["m"], "n": p["n"], "k": p["k"], "copies": p["copies"], "lookup_ns": 12.5,
            "lookup_hits": 200000,
            "table": {"found": True, "variant": chosen, "config": [1, 24]}, "variants": variants,
            "table_times_us": [variants[chosen]["median_us"] * table_slower] * 3,
        })  # fmt: skip
    return lines


def test_judge_gives_regret_on_hardware_beside_the_recording(tmp_path: Path) -> None:
    manifest = build(tmp_path, "--no-compile")
    text = "\n".join("POINT " + json.dumps(line) for line in fake_output(manifest)) + "\nnoise line\n"
    verdict = table_dispatch.judge(manifest, table_dispatch.parse_lines(text))
    assert verdict["points_timed"] == len(manifest["points"]) == verdict["points_with_regret"]
    for row in verdict["points"]:
        best = min(t for v, t in row_recorded(manifest, row).items() if v != FAILS)  # parity failed: excluded
        assert row["best_median_us"] == pytest.approx(best)
        assert row["regret_on_hardware"] == pytest.approx(row["table_median_us"] / best - 1)
        assert row["parity_failed"] == ([FAILS] if FAILS in row_recorded(manifest, row) else [])
        assert row["lookup_matches_replay"] == (row["replay_variant"] == row["table_variant"])


def test_judge_times_the_recordings_own_best_as_the_floor(tmp_path: Path) -> None:
    """The recording's fastest variant, timed by the program 10% slower than recorded: its regret here is the
    part of the table's regret that comes from the two measurement contexts, not from the table."""
    manifest = build(tmp_path, "--no-compile")
    lines = fake_output(manifest)
    expected = []
    for line, planned in zip(lines, manifest["points"], strict=True):
        recorded = planned["recorded_median_us"]
        top = min(recorded, key=recorded.__getitem__)
        if top == FAILS:
            continue
        timing = line["variants"][top]
        timing["times_us"] = [t * 1.1 for t in timing["times_us"]]
        passed = {v: statistics.median(d["times_us"]) for v, d in line["variants"].items() if v != FAILS}
        expected.append(passed[top] / min(passed.values()) - 1)
    text = "\n".join("POINT " + json.dumps(line) for line in lines)
    verdict = table_dispatch.judge(manifest, table_dispatch.parse_lines(text))
    floor = verdict["recorded_best_regret_on_hardware"]
    assert expected and any(e > 0 for e in expected)
    assert floor["mean"] == pytest.approx(statistics.fmean(expected))
    assert floor["max"] == pytest.approx(max(expected))


def row_recorded(manifest: dict, row: dict) -> dict[str, float]:  # type: ignore[type-arg]
    return next(p["recorded_median_us"] for p in manifest["points"] if p["key"] == row["key"])  # type: ignore[no-any-return]


def test_bad_input_exits_2_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(made_up_recording(tmp_path / "recording.json.gz"))
    cases = [
        (data, ["--held-out-shapes", "1x1"], "was not measured"),
        (data, ["--every", "1"], "--every must be >= 2"),
        (data, ["--formats", "Q8_0"], "no sm_90 decode measurements of Q8_0"),
        (str(OLD), [], "recorded variants are not in tb-decode@"),  # measured before the space changed
    ]
    for path, extra, message in cases:
        argv = ["build", "--data", path, "--build-dir", str(tmp_path / "b"), *H200, "--no-compile", *extra]
        code = table_dispatch.main(argv)
        assert code == 2 and message in capsys.readouterr().err
    code = table_dispatch.main(["run", "--build-dir", str(tmp_path / "nothing")])
    assert code == 2 and "no build here" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_consumer_compiles_with_nvcc_and_fails_clearly_without_a_gpu(tmp_path: Path) -> None:
    build(tmp_path)
    binary = tmp_path / "b" / "consumer_Q4_0"
    assert binary.is_file()
    has_gpu = (
        shutil.which("nvidia-smi") is not None
        and subprocess.run(["nvidia-smi"], capture_output=True, timeout=30).returncode == 0
    )
    if has_gpu:
        pytest.skip("a GPU is attached: the device bench times it (bench/device_table_dispatch.sh)")
    out = tmp_path / "result.json"
    code = table_dispatch.main(
        ["run", "--build-dir", str(tmp_path / "b"), "--reps", "2", "--timeout-s", "60", "--out", str(out)]
    )
    result = json.loads(out.read_text())
    assert code == 1 and result["points_timed"] == 0
    assert "exit 4" in result["errors"]["Q4_0"] and "CUDA error" in result["errors"]["Q4_0"]
