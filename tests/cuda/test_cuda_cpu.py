"""CUDA backend pieces that need no GPU (run in CI): import guards, SASS census, argument packing,
rotation sizing, CUPTI/event pairing, and that the embedded worker stays host-only without a GPU."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from kernels.formats.registry import FORMATS
from kernels.packages.build import compile_units
from kernels.packages.expressions import as_int
from kernels.packages.loader import builtin_packages, load_folder
from kernels.packages.package import DeviceFacts
from workers.backends.base import Dispatch
from workers.backends.cuda import pair_times
from workers.backends.registry import create_backend
from workers.harness import cuda_driver as cd
from workers.harness.cuda_compile import parse_sass, summarize_census
from workers.profilers.cupti import KernelRecord
from workers.runner import weight_copies

FIXTURE_PACKAGE = Path(__file__).resolve().parents[1] / "fixtures" / "cuda" / "fixture-decode"

SASS = """
	code for sm_90
		Function : tb_decode_kb1_tw8
	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90"
        /*0000*/    LDC R1, c[0x0][0x28] ;    /* 0x00000a00ff017b82 */
    /* 0x000fe40000000800 */
        /*0010*/    LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;    /* 0x0000000402047981 */
        /*0020*/    @P0 LDG.E.128.CONSTANT R8, desc[UR4][R2.64+0x200] ;         /* 0x0000000402087981 */
        /*0030*/    IDP.4A.S8.S8 R12, R4, R16, RZ ;    /* 0x000000100400c226 */
        /*0040*/    STL [R1], R12 ;    /* 0x0000000c01007387 */
        /*0050*/    EXIT ;    /* 0x000000000000794d */
		Function : tb_decode_kb2_tw8
        /*0000*/    SHFL.BFLY PT, R3, R2, 0x10, 0x1f ;    /* 0x0e201f0002037f89 */
"""


def test_sass_census_counts_opcodes_per_function() -> None:
    census = parse_sass(SASS)
    assert set(census) == {"tb_decode_kb1_tw8", "tb_decode_kb2_tw8"}
    first = census["tb_decode_kb1_tw8"]
    assert first["LDG.E.128.CONSTANT"] == 2  # the predicated one counts too
    summary = summarize_census(first)
    assert summary["global_loads_128"] == 2
    assert summary["dp4a"] == 1
    assert summary["local_stores"] == 1  # STL = a spill / stack store
    assert summarize_census(census["tb_decode_kb2_tw8"])["shuffles"] == 1


def test_kernel_args_are_packed_with_c_alignment() -> None:
    blob, offsets = cd.pack_args(
        [("ptr", 0x1000), ("i32", 7), ("ptr", 0x2000), ("i32", -1), ("f32", 0.5), ("i64", 3), ("u32", 9)]
    )
    assert offsets == [0, 8, 16, 24, 28, 32, 40]
    assert struct.unpack_from("<qI", blob, 32) == (3, 9)
    assert struct.unpack_from("<QiQif", blob.ljust(32, b"\0"), 0)[0] == 0x1000
    assert struct.unpack_from("<i", blob, 24)[0] == -1
    assert struct.unpack_from("<f", blob, 28)[0] == 0.5


def test_weight_rotation_exceeds_twice_the_l2() -> None:
    l2 = 60 << 20
    copies = weight_copies(1 << 20, l2, warm_cache=False)
    assert copies * (1 << 20) > 2 * l2
    assert weight_copies(1_350_000_000, l2, warm_cache=False) == 1  # the LM head alone is 22x L2
    assert weight_copies(91 << 20, l2, warm_cache=False) == 2
    assert weight_copies(1 << 20, l2, warm_cache=True) == 1


def test_cupti_records_pair_with_launches_in_order() -> None:
    rows = {
        "A": [Dispatch(0, 999, 50_000, 0), Dispatch(2, 999, 50_000, 0)],
        "B": [Dispatch(1, 999, 50_000, 1)],
    }
    launch_log = ["A", "B", "A", "B", "A"]  # warm-up A, B first, then timed A, B, A
    records = [KernelRecord("k", 100 * i, 100 * i + 10 + i, i) for i in range(5)]
    events = {"A": [21_000, 22_000, 23_000], "B": [31_000, 32_000]}
    clocks = pair_times(rows, launch_log, records, events)
    assert clocks == {"A": "cupti", "B": "cupti"}
    assert [d.device_ns for d in rows["A"]] == [12, 14]  # records 2 and 4
    assert [d.event_ns for d in rows["A"]] == [22_000, 23_000]
    assert [d.device_ns for d in rows["B"]] == [13]


def test_without_matching_cupti_records_device_time_stays_the_event_time() -> None:
    rows = {"A": [Dispatch(0, 21_000, 50_000, 0)]}
    clocks = pair_times(rows, ["A", "A"], [KernelRecord("k", 0, 5, 0)], {"A": [20_000, 21_000]})
    assert clocks == {"A": "cuda-events"}
    assert rows["A"][0].device_ns == 21_000 and rows["A"][0].event_ns == 21_000


def test_backend_imports_and_detects_nothing_without_a_gpu(tmp_path: Path) -> None:
    backend = create_backend("cuda", tmp_path)
    if cd.available() and backend.detect() is not None:  # on the GPU machine: only the registry wiring
        assert backend.name == "cuda"
        return
    assert backend.detect() is None
    assert backend.supports("sm_90", "decode", "Q4_0") is None
    assert "sm_90" in (backend.supports("gfx906", "decode", "Q4_0") or "")
    assert backend.supports("sm_90", "prefill", "Q4_0") is None  # any package with a hip/cuda source


def test_the_library_package_launches_on_sm90_like_its_abi_says() -> None:
    package = builtin_packages()["tb-decode"]
    variant = package.parse("MX4/KB4/RW2/U2/RG1/PG0/PP1", "cuda")
    assert package.symbol(variant) == "tb_decode_mx4_kb4_rw2_u2_rg1_pg0_pp1"
    values = package.bindings(variant, 17408, 5120, 2, FORMATS["Q4_K"], DeviceFacts("cuda", "sm_90", 132, 32))
    geo = package.geometry(values)
    assert geo.block == (256, 1, 1) and geo.grid[1] == 4
    assert geo.grid[0] * 8 * 2 >= 17408  # 8 warps x 2 rows per workgroup cover every row
    assert as_int(values["tiles"]) == geo.grid[0]
    (unit,) = compile_units(package, "Q4_K", "cuda", [variant])
    assert unit.defines["TB_FMT_Q4_K"] == "1" and unit.defines["TB_QBITS"] == "4"
    persistent = package.parse("MX1/KB1/RW1/U8/RG1/PG2/PP0", "cuda")
    values = package.bindings(
        persistent, 248320, 5120, 1, FORMATS["Q4_0"], DeviceFacts("cuda", "sm_90", 132, 32)
    )
    assert package.geometry(values).grid == (264, 1, 1) and as_int(values["tiles"]) == 248320 // 8


def test_the_test_fixture_kernel_is_a_package_in_template_form() -> None:
    """tests/fixtures/cuda/fixture-decode names template instantiations: one unit, NVRTC lowers names."""
    fixture = load_folder(FIXTURE_PACKAGE)
    variants = fixture.space("cuda")
    (unit,) = compile_units(fixture, "Q8_0", "cuda", variants)
    assert set(unit.symbols(fixture).values()) == {
        f"tb_decode<{v.params['kb']}, {v.params['tw']}, true>" for v in variants
    }
    assert "Q6_K" not in fixture.manifest.formats  # group-16 scales: library kernel only


def test_a_prelaunch_kernel_adds_its_record_to_the_dispatch() -> None:
    """Two launches per dispatch (prelaunch + variant): device_ns is the sum of both CUPTI records."""
    rows = {"A": [Dispatch(0, 999, 50_000, 0)], "B": [Dispatch(1, 999, 50_000, 0)]}
    launch_log = ["A", "A", "B", "A", "A", "B"]  # warm-up A (2 kernels), B; then timed A (2 kernels), B
    records = [KernelRecord("k", 0, d, i) for i, d in enumerate([3, 10, 7, 4, 20, 8])]
    clocks = pair_times(rows, launch_log, records, {"A": [1, 2], "B": [3, 4]}, {"A": 2, "B": 1})
    assert clocks == {"A": "cupti", "B": "cupti"}
    assert rows["A"][0].device_ns == 24 and rows["B"][0].device_ns == 8
    # a record missing inside a dispatch: not trusted
    rows = {"A": [Dispatch(0, 999, 50_000, 0)]}
    assert pair_times(rows, ["A"], [KernelRecord("k", 0, 5, 0)], {"A": [7]}, {"A": 2}) == {"A": "cuda-events"}


def test_an_overlapped_prelaunch_dispatch_is_timed_by_its_span() -> None:
    """[prelaunch] overlap: the variant may start before the prelaunch kernel ends (one graph, programmatic
    dependent launch), so the sum of the two records would count the overlap twice: the span is the time."""
    rows = {"A": [Dispatch(0, 999, 50_000, 0)], "B": [Dispatch(1, 999, 50_000, 0)]}
    launch_log = ["A", "A", "B"]
    # A's prelaunch kernel runs 100..1600 ns, its variant 400..7400 (it started 1.2 us before the first ended)
    records = [
        KernelRecord("prep", 100, 1_600, 5),
        KernelRecord("main", 400, 7_400, 5),
        KernelRecord("b", 0, 8, 6),
    ]
    clocks = pair_times(rows, launch_log, records, {"A": [1], "B": [3]}, {"A": 2, "B": 1}, span={"A"})
    assert clocks == {"A": "cupti", "B": "cupti"}
    assert rows["A"][0].device_ns == 7_300  # 7400 - 100, not 1500 + 7000
    assert rows["B"][0].device_ns == 8
    # without overlap the same records are summed
    rows = {"A": [Dispatch(0, 999, 50_000, 0)]}
    pair_times(rows, ["A", "A"], records[:2], {"A": [1]}, {"A": 2})
    assert rows["A"][0].device_ns == 8_500


def test_dumped_records_show_how_an_overlapped_dispatch_lay(tmp_path: Path) -> None:
    """TUNEBASE_CUPTI_RECORDS's JSON lines, read back by bench/overlap_records.py: gap < 0 means overlap."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import overlap_records

    from workers.backends.cuda import dump_records

    records = [
        KernelRecord("tb_decode_prep_rg1", 0, 1_500, 1),
        KernelRecord("tb_decode_mx1_kb1_rw2_u5_rg1_pg0_pp16", 600, 7_600, 1),
        KernelRecord("tb_decode_mx1_kb1_rw1_u5_rg1_pg4_pp5", 9_000, 15_000, 2),
        KernelRecord("tb_decode_prep_rg1", 20_000, 21_400, 3),
        KernelRecord("tb_decode_mx1_kb1_rw2_u5_rg1_pg0_pp16", 22_000, 29_000, 3),
    ]
    log = ["A", "A", "B", "A", "A"]
    path = tmp_path / "records.jsonl"
    dump_records(path, log, records)
    summary = overlap_records.summarize([json.loads(line) for line in path.read_text().splitlines()])
    assert set(summary) == {"session 0: A"}  # B has no prelaunch kernel
    a = summary["session 0: A"]
    assert a["dispatches"] == 2 and a["overlapped"] == 1
    assert a["gap_us"] == -0.15 and a["span_us"] == 8.3 and a["sum_us"] == 8.45  # medians of two
    assert overlap_records.main([str(tmp_path / "missing.jsonl")]) == 2
