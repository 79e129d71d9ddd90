"""ROCm pieces that need no GPU and no compiler: argument packing, geometry, profiler argv, mapping."""

from __future__ import annotations

import csv
import struct
from pathlib import Path

import pytest

from kernels.formats.registry import FORMATS
from kernels.packages.expressions import as_int
from kernels.packages.loader import builtin_packages
from kernels.packages.package import DeviceFacts
from workers.backends.rocm import Profiler, harness_argv, profiled_argv, times_from_capture
from workers.harness.hip_runner import llc_bytes, pack_kernel_args
from workers.profilers.rocprof_detect import parse_capture
from workers.runner import kernel_args, weight_copies

DECODE = builtin_packages()["tb-decode"]
PREFILL = builtin_packages()["tb-prefill"]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rocprof"


def test_decode_argument_buffer_layout() -> None:
    variant = DECODE.parse("MX4/KB4/RW2/U2/RG1/PG0/PP1", "rocm")
    values = DECODE.bindings(variant, 17408, 5120, 2, FORMATS["Q4_0"], DeviceFacts("rocm", "gfx906", 60, 64))
    names = ("qs", "qh", "sc", "x", "y", "workspace", "counters")
    pointers = {name: 0x7F00_0000_1000 * (i + 1) if name != "qh" else 0 for i, name in enumerate(names)}
    weights = {part: pointers[part] for part in ("qs", "qh", "sc")}
    spaces = {5: pointers["workspace"], 6: pointers["counters"]}
    args = kernel_args(DECODE.args_for("rocm"), weights, pointers["x"], pointers["y"], spaces, values)
    raw = pack_kernel_args(args)
    # 7 pointers at offsets 0..48, then m, n, k, tiles, grid_x as int32 at 56..72, padded to 80 bytes
    assert len(raw) == 80
    assert struct.unpack_from("<7Q", raw, 0) == tuple(pointers[name] for name in names)
    # tiles by hand: 4 waves of 64 x RW 2 = 8 rows per workgroup; 17408 / 8 = 2176 (one-shot: grid.x too)
    assert struct.unpack_from("<5i", raw, 56) == (2, 17408, 5120, 2176, 2176)


def test_prefill_argument_buffer_layout_pads_to_eight() -> None:
    variant = PREFILL.parse("N128/M64/W2x4/K4/S2/SK2/MB1/E0", "rocm")
    values = PREFILL.bindings(
        variant, 5120, 17408, 512, FORMATS["Q4_0"], DeviceFacts("rocm", "gfx942", 304, 64)
    )
    args = kernel_args(PREFILL.args_for("rocm"), {"qs": 8, "qh": 0, "sc": 16}, 24, 32, {5: 40}, values)
    raw = pack_kernel_args(args)
    # 6 pointers (qs, a NULL qh, sc, x, y, workspace: 48 bytes) + m, n, k (12 bytes) = 60, padded to 64
    assert len(raw) == 64
    assert struct.unpack("<6Q3i4x", raw) == (8, 0, 16, 24, 32, 40, 512, 5120, 17408)


def test_every_argument_kind_packs_with_natural_alignment() -> None:
    raw = pack_kernel_args([("i32", 1), ("ptr", 2), ("f32", 0.5), ("i64", -3), ("u32", 7)])
    assert struct.unpack("<i4xQf4xqI4x", raw) == (1, 2, 0.5, -3, 7)
    with pytest.raises(TypeError, match="f16"):
        pack_kernel_args([("f16", 1)])


def test_launch_geometry_from_the_manifest() -> None:
    device = DeviceFacts("rocm", "gfx906", 60, 64)
    decode = DECODE.geometry(
        DECODE.bindings(
            DECODE.parse("MX4/KB4/RW2/U2/RG1/PG0/PP1", "rocm"), 17408, 5120, 1, FORMATS["Q4_0"], device
        )
    )
    # 256 threads = 4 waves of 64, 2 rows each: grid.x = 17408 / 8 = 2176; grid.y = KB
    assert (decode.grid, decode.block, decode.shared_bytes) == ((2176, 4, 1), (256, 1, 1), 0)
    persistent = DECODE.bindings(
        DECODE.parse("MX1/KB1/RW1/U8/RG1/PG2/PP0", "rocm"), 1024, 5120, 1, FORMATS["Q4_0"], device
    )
    # 256 tiles of 4 rows, but a persistent grid of 2 workgroups per CU: 120 workgroups stride over them
    assert DECODE.geometry(persistent).grid == (120, 1, 1) and as_int(persistent["tiles"]) == 256
    mi300 = DeviceFacts("rocm", "gfx942", 304, 64)
    values = PREFILL.bindings(
        PREFILL.parse("N128/M32/W4x2/K4/S2/SK2/MB1/E0", "rocm"), 5120, 17408, 600, FORMATS["Q4_0"], mi300
    )
    prefill = PREFILL.geometry(values)
    # 8 waves of 64; grid.z = split-K; static LDS (no dynamic bytes on AMD)
    assert (prefill.grid, prefill.block, prefill.shared_bytes) == ((40, 19, 2), (512, 1, 1), 0)
    pre = PREFILL.prelaunch_geometry(values)  # one thread per 4 x values or 4 y cells (split-K zeroes y)
    assert pre.grid == (-(-max(600 * 17408 // 4, 600 * 5120 // 4) // 256), 1, 1) and pre.block == (256, 1, 1)


def test_rotation_exceeds_the_last_level_cache() -> None:
    assert llc_bytes("gfx906", 4 << 20) == 4 << 20
    assert llc_bytes("gfx942", 4 << 20) == 256 << 20  # Infinity Cache, not in hipDeviceProp_t
    copy = 17408 * 5120 * 9 // 8  # ~100 MB of Q8-like weights
    assert weight_copies(copy, 4 << 20, False) == 1 and weight_copies(copy, 256 << 20, False) == 6
    assert weight_copies(1 << 20, 4 << 20, False) == 9  # 9 MiB > 2 x 4 MiB
    assert weight_copies(1 << 20, 4 << 20, True) == 1


def test_profiler_command_lines() -> None:
    inner = harness_argv("/usr/bin/python3", Path("/w/task.json"))
    assert inner == ["/usr/bin/python3", "-m", "workers.harness.hip_runner", "/w/task.json"]
    v3 = profiled_argv(Profiler("rocprofv3", "/opt/rocm/bin/rocprofv3"), Path("/w/profile"), inner)
    assert v3 == [
        "/opt/rocm/bin/rocprofv3", "--kernel-trace", "--output-format", "csv", "-d", "/w/profile", "--",
        "/usr/bin/python3", "-m", "workers.harness.hip_runner", "/w/task.json",
    ]  # fmt: skip
    v1 = profiled_argv(Profiler("rocprof", "/opt/rocm/bin/rocprof"), Path("/w/profile"), inner)
    assert v1 == [
        "/opt/rocm/bin/rocprof", "--stats", "--timestamp", "on", "-o", "/w/profile/results.csv",
        "/usr/bin/python3", "-m", "workers.harness.hip_runner", "/w/task.json",
    ]  # fmt: skip
    assert profiled_argv(None, Path("/w/profile"), inner) == inner


def _launch_log(pairs: int) -> list[dict[str, str]]:
    """Parity launch of each variant, then interleaved timed launches (what hip_runner logs)."""
    log = []
    for i in range(pairs):
        stage = "parity" if i == 0 else "timed"
        log.append({"variant": "KB8/TW8", "symbol": "tb_decode_q4_0_kb8_tw8", "stage": stage})
        log.append({"variant": "KB1/TW4", "symbol": "tb_decode_q4_0_kb1_tw4", "stage": stage})
    return log


@pytest.mark.parametrize(
    ("name", "start", "end"),
    [
        ("v3_rocm63_kernel_trace.csv", "Start_Timestamp", "End_Timestamp"),
        ("v3_rocm62_kernel_trace.csv", "Start_Timestamp", "End_Timestamp"),
        ("v1_rocm5_results.csv", "BeginNs", "EndNs"),
        ("v1_rocm4_results.csv", "BeginNs", "EndNs"),
    ],
)
def test_fixture_capture_maps_back_to_variants(name: str, start: str, end: str) -> None:
    text = (FIXTURES / name).read_text()
    with (FIXTURES / name).open(newline="") as handle:
        raw = [
            r
            for r in csv.DictReader(handle)
            if "fillBuffer" not in (r.get("Kernel_Name") or r.get("KernelName", ""))
        ]
    rows = parse_capture(text, name).dispatches
    times = times_from_capture(rows, _launch_log(len(raw) // 2))
    assert isinstance(times, dict)
    kernel_col = "Kernel_Name" if "Kernel_Name" in raw[0] else "KernelName"
    for variant, tag in (("KB8/TW8", "kb8_tw8"), ("KB1/TW4", "kb1_tw4")):
        durations = [int(r[end]) - int(r[start]) for r in raw if tag in r[kernel_col]]
        assert times[variant] == durations[1:]  # the parity launch is not a timing


def test_capture_that_misses_a_dispatch_is_refused() -> None:
    rows = parse_capture((FIXTURES / "v3_rocm60_kernel_trace.csv").read_text(), "t.csv").dispatches
    result = times_from_capture(rows, _launch_log(len(rows) // 2 + 1))
    assert isinstance(result, str) and "harness launched" in result


def test_prelaunch_and_variant_rows_add_up_per_dispatch() -> None:
    """A dispatch with a prelaunch kernel logs two launches with one dispatch id: one time, their sum."""
    from workers.profilers.rocprof_common import DispatchRow

    launches = []
    rows: list[DispatchRow] = []
    t = 0
    for d, stage in enumerate(["parity", "timed", "timed"]):
        for symbol, ns in (("tb_prefill_prep_sk1", 5), ("tb_prefill_n64_m32", 100 + d)):
            entry = {"variant": "V", "symbol": symbol, "stage": stage, "buffer": 0}
            if stage == "timed":
                entry["dispatch"] = d
            launches.append(entry)
            rows.append(DispatchRow(index=len(rows), kernel=symbol, start_ns=t, end_ns=t + ns))
            t += 1000
    times = times_from_capture(rows, launches)
    assert times == {"V": [5 + 101, 5 + 102]}
