"""Parsers on real-format (hand-made) rocprof files of each generation; damaged files name their line."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from workers.profilers.rocprof_common import ProfileFormatError, clean_kernel_name
from workers.profilers.rocprof_detect import detect, parse_capture
from workers.profilers.rocprof_mapping import map_dispatches

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rocprof"
A, B = "tb_decode_q4_0_kb8_tw8", "tb_decode_q4_0_kb1_tw4"


def raw_rows(name: str) -> list[dict[str, str]]:
    with (FIXTURES / name).open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("v3_rocm63_kernel_trace.csv", "rocprofv3_kernel_trace"),
        ("v3_rocm62_kernel_trace.csv", "rocprofv3_kernel_trace"),
        ("v3_rocm60_kernel_trace.csv", "rocprofv3_kernel_trace"),
        ("v3_kernel_stats.csv", "rocprofv3_kernel_stats"),
        ("v1_rocm5_results.csv", "rocprof_results"),
        ("v1_rocm4_results.csv", "rocprof_results"),
        ("v1_results.stats.csv", "rocprof_stats"),
    ],
)
def test_detect(name: str, kind: str) -> None:
    assert detect((FIXTURES / name).read_text(), name) == kind


def test_v3_agent_string_generation() -> None:
    capture = parse_capture((FIXTURES / "v3_rocm63_kernel_trace.csv").read_text(), "t.csv")
    raw = raw_rows("v3_rocm63_kernel_trace.csv")
    assert len(capture.dispatches) == len(raw) == 11
    for row, src in zip(capture.dispatches, raw, strict=True):
        assert row.agent == "4"  # "Agent 4"
        assert row.duration_ns == int(src["End_Timestamp"]) - int(src["Start_Timestamp"])
        assert row.dispatch_id == int(src["Dispatch_Id"])
        assert row.resources["vgpr"] == int(src["VGPR_Count"])
        assert row.resources["lds"] == int(src["LDS_Block_Size"])
    assert {r.kernel for r in capture.dispatches} == {A, B, "__amd_rocclr_fillBufferAligned"}


@pytest.mark.parametrize("name", ["v3_rocm62_kernel_trace.csv", "v3_rocm60_kernel_trace.csv"])
def test_v3_integer_agent_generations(name: str) -> None:
    capture = parse_capture((FIXTURES / name).read_text(), name)
    raw = raw_rows(name)
    assert [r.agent for r in capture.dispatches] == [src["Agent_Id"] for src in raw]
    assert [r.start_ns for r in capture.dispatches] == [int(src["Start_Timestamp"]) for src in raw]
    assert all(
        r.resources["lds"] == int(src["Group_Segment_Size"])
        for r, src in zip(capture.dispatches, raw, strict=True)
    )
    has_dispatch = "Dispatch_Id" in raw[0]
    assert all((r.dispatch_id is not None) == has_dispatch for r in capture.dispatches)


@pytest.mark.parametrize(
    ("name", "vgpr_col"), [("v1_rocm5_results.csv", "arch_vgpr"), ("v1_rocm4_results.csv", "vgpr")]
)
def test_v1_results(name: str, vgpr_col: str) -> None:
    capture = parse_capture((FIXTURES / name).read_text(), name)
    raw = raw_rows(name)
    for row, src in zip(capture.dispatches, raw, strict=True):
        assert row.kernel.split("(")[0] in (A, B)  # ".kd" and " [clone .kd]" stripped; signature kept
        assert row.duration_ns == int(src["EndNs"]) - int(src["BeginNs"])
        assert row.resources["vgpr"] == int(src[vgpr_col])
    if name == "v1_rocm4_results.csv":
        assert "fbar" in capture.dispatches[0].resources
    else:
        assert capture.dispatches[0].resources["agpr"] == 0


def test_stats_files() -> None:
    v3 = parse_capture((FIXTURES / "v3_kernel_stats.csv").read_text(), "s.csv").stats
    assert {s.kernel for s in v3} == {A, B, "__amd_rocclr_fillBufferAligned"}
    assert all(s.min_ns is not None and s.max_ns is not None and s.min_ns <= s.max_ns for s in v3)
    v1 = parse_capture((FIXTURES / "v1_results.stats.csv").read_text(), "r.csv").stats
    assert sorted(s.calls for s in v1) == [5, 5]
    assert all(s.min_ns is None for s in v1)


def test_clean_kernel_name() -> None:
    assert clean_kernel_name("k(float*) [clone .kd]") == "k(float*)"
    assert clean_kernel_name("k.kd") == "k"
    assert clean_kernel_name("k") == "k"


@pytest.mark.parametrize(
    ("mutate", "line", "message"),
    [
        (lambda lines: [*lines[:3], lines[3].rsplit(",", 1)[0], *lines[4:]], 4, "expected"),
        (
            lambda lines: [*lines[:2], lines[2].replace("1551401624", "x551401624", 1), *lines[3:]],
            3,
            "not a number",
        ),
        (lambda lines: ["Foo,Bar", *lines[1:]], 1, "unknown file"),
    ],
)
def test_damaged_trace_names_line(mutate, line: int, message: str) -> None:  # type: ignore[no-untyped-def]
    lines = (FIXTURES / "v3_rocm63_kernel_trace.csv").read_text().splitlines()
    with pytest.raises(ProfileFormatError, match=message) as info:
        parse_capture("\n".join(mutate(lines)) + "\n", "bad.csv")
    assert info.value.line == line
    assert f"bad.csv:{line}:" in str(info.value)


def test_results_without_timestamps_refused() -> None:
    text = "Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr,vgpr,sgpr,fbar,sig,obj\n"
    with pytest.raises(ProfileFormatError, match="--timestamp on"):
        parse_capture(text + '0,"k.kd",0,0,0,1,1,64,64,0,0,4,8,0,0x0,0x0\n', "r.csv")


def test_mapping_by_symbol_and_order() -> None:
    rows = parse_capture((FIXTURES / "v3_rocm63_kernel_trace.csv").read_text(), "t.csv").dispatches
    # the harness launched A and B alternately, 5 each; a second variant "A-alt" shares A's symbol
    launches = [
        ("KB8/TW8" if i % 4 == 0 else "KB8/TW8-alt", A) if i % 2 == 0 else ("KB1/TW4", B) for i in range(10)
    ]
    mapped = map_dispatches(rows, launches)
    assert len(mapped["KB1/TW4"]) == 5 and all(r.kernel == B for r in mapped["KB1/TW4"])
    a_rows = sorted([r for r in rows if r.kernel == A], key=lambda r: r.start_ns)
    assert mapped["KB8/TW8"] == a_rows[0::2] and mapped["KB8/TW8-alt"] == a_rows[1::2]
    with pytest.raises(ValueError, match="harness launched 6"):
        map_dispatches(rows, [*launches, ("KB1/TW4", B)])
