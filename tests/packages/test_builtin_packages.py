"""The built-in families are packages (kernels/library): their spaces, names, rules and launch geometry."""

from __future__ import annotations

import math
import re

import pytest

from kernels.families import family_for_phase
from kernels.families.base import InvalidVariant
from kernels.formats.registry import FORMATS
from kernels.packages.build import compile_units
from kernels.packages.expressions import as_int, parse
from kernels.packages.loader import LIBRARY, builtin_packages
from kernels.packages.package import DeviceFacts

DECODE = builtin_packages()["tb-decode"]
PREFILL = builtin_packages()["tb-prefill"]


def test_decode_spaces() -> None:
    gpu = DECODE.space("rocm")
    cuda = DECODE.space("cuda")
    # CUDA adds the cp.async ring (pp 2, 3), the int8 tensor-core kernels (rg 16), the M = 1 stream kernel
    # (pp 5), the M = 1 flat kernel (pp 6) and the interleaved ring (pp 7, 8: 7 points for IQ4_XS GateUp
    # M = 2 / 3) to the register kernels both backends share
    assert len(gpu) == 68 and [v.name for v in cuda if v.params["pp"] < 2] == [v.name for v in gpu]
    ring = [v.params for v in cuda if v.params["pp"] in (2, 3) and v.params["rg"] != 16]
    tc = [v.params for v in cuda if v.params["rg"] == 16]
    stream = [v.params for v in cuda if v.params["pp"] == 5]
    stream_xq = [v.params for v in cuda if v.params["pp"] in (16, 17)]
    assert [{**p, "pp": p["pp"] - 11 if p["pp"] == 16 else 9} for p in stream_xq if p["mx"] == 1] == [
        v.params for v in cuda if v.params["pp"] in (5, 9)
    ]
    # and PP16 at M = 2 / 4 (x's image copied whatever M): MX2 RW1 / RW2, MX4 RW1 at PG3 (MX4 RW2 spills
    # there), MX4 RW2 at PG2 (128 registers)
    assert sorted((p["mx"], p["rw"], p["u"], p["pg"]) for p in stream_xq if p["mx"] > 1) == [
        (2, 1, 5, 3), (2, 1, 6, 3), (2, 2, 5, 3), (4, 1, 5, 3), (4, 1, 6, 3), (4, 2, 5, 2),
    ] and all(p["pp"] == 16 for p in stream_xq if p["mx"] > 1)  # fmt: skip
    # 147 (was 136): k3m's 4 points of the PP6 flat kernel (M = 1: U stages of a cp.async ring, PG 3 / 4),
    # k3i's 7 interleaved ring points (PP 7 / 8); 151: k3j's 4 MX4 RG16 split-K points for IQ4_XS GateUp M = 3
    # (KB5 RW1 PP2 / PP3: 544 KB4 blocks were 1.37 waves of 396 slots; KB4 / KB5 RW2 PP2: the one-slice RW2
    # grid ran 68 blocks, one per SM); 157: k3q's 6 PP9 points (the stream kernel with split waits, on 6 of
    # the PP5 points' (rg, rw, u, pg)); 174: the RG16 K phases (PP 10 / 11: MX2 / 4 / 8 x PG2 / 3; PP 12
    # and RW2 PP 10 to MX4: PG2); 190: the same with x quantised once per launch by the prelaunch kernel
    # (PP 13 / 14 / 15 = PP 10 / 11 / 2: MX2 / 4 / 8 PG2, PP13 PG3 too, RW2 PP13 / PP15 to MX4); 204: the
    # stream kernel's the same way (PP 16 / 17 = PP 5 / 9, each of their points); 209: PP16 at M = 2 / 4;
    # 210: PP16 MX4/RW2 at 2 blocks per SM (PG2); 217: PP18 / 19 (x read from the workspace, M = 1)
    flat = [v.params for v in cuda if v.params["pp"] == 6]
    iw = [v.params for v in cuda if v.params["pp"] in (7, 8)]
    split = [v.params for v in cuda if v.params["pp"] == 9]
    assert len(ring) == 36 and len(tc) == 61 and len(stream) == 8 and len(flat) == 4 and len(iw) == 7
    assert len(split) == 6 and all({**p, "pp": 5} in stream for p in split)
    assert len(cuda) == 217
    per_launch = [v for v in cuda if DECODE.has_prelaunch(v, "cuda")]
    assert len(per_launch) == 43 and all(v.params["pp"] >= 13 for v in per_launch)
    assert {DECODE.prelaunch_symbol(v) for v in per_launch} == {f"tb_decode_prep_rg{rg}" for rg in (1, 2, 16)}
    assert not any(DECODE.has_prelaunch(v, "rocm") for v in DECODE.space("rocm"))
    assert all(p["mx"] == p["kb"] == p["rg"] == p["rw"] == 1 and p["pg"] in (3, 4) for p in flat)
    assert all(p["kb"] == 1 and p["rg"] == 1 and p["mx"] in (2, 4) and p["pg"] in (2, 3) for p in iw)
    assert all(p["mx"] == 1 and p["kb"] == 1 and p["rg"] in (1, 2) for p in stream)
    assert {p["u"] for p in stream} == {4, 5, 6} and all(p["u"] in (2, 4, 8) for p in ring + tc)
    assert {p["u"] for p in iw} == {2, 4, 5}
    assert all(p["pp"] in (2, 3, 4, *range(10, 16)) and p["u"] == 8 and p["mx"] in (2, 4, 8) for p in tc)
    assert all(p["kb"] == 1 and p["pg"] in (2, 3) for p in tc if p["pp"] >= 10)
    assert all(p["pg"] == 2 for p in tc if p["pp"] in (12, 14, 15) or (p["pp"] >= 10 and p["rw"] == 2))
    assert [p["mx"] for p in tc if p["pp"] == 4] == [2, 4, 8]  # RG16 only: the dp4a ring has 2 or 3 stages
    assert {v.params["mx"] for v in cuda if v.params["rg"] != 16} == {1, 2, 4} and {
        (p["kb"], p["pg"]) for p in tc
    } == {(1, 0), (1, 2), (1, 3), (4, 0), (5, 0)}
    assert all(p["mx"] == 4 for p in tc if p["kb"] == 5 or (p["kb"] > 1 and p["rw"] == 2))
    assert all(p["kb"] == 1 and p["rg"] in (1, 8) and p["rw"] * p["u"] * p["pp"] in (8, 12, 16) for p in ring)
    assert sum(p["mx"] == 1 for p in ring) == 12 and sum(p["mx"] == 4 for p in ring) == 17
    assert sum(p["rg"] == 8 for p in ring) == 6 and all(p["mx"] > 1 for p in ring if p["rg"] == 8)
    assert gpu[0].name == "MX1/KB1/RW1/U2/RG1/PG0/PP1" and gpu[-1].name == "MX4/KB4/RW2/U2/RG1/PG0/PP1"
    assert sum(v.params["pp"] for v in gpu) == 38  # the pipelined kernel, beside 30 single-buffered points
    assert sum(v.params["mx"] == 2 for v in gpu) == 10 and {v.params["pg"] for v in gpu} == {0, 2, 3, 4}
    assert all(v.params["mx"] == 1 and v.params["rw"] == 1 for v in gpu if v.params["pg"] == 4)
    host = DECODE.space("host")
    assert [v.name for v in host] == [
        "MX4/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB1/RW2/U2/RG1/PG0/PP0", "MX4/KB1/RW2/U4/RG1/PG0/PP0",
        "MX4/KB4/RW1/U4/RG1/PG0/PP0", "MX4/KB4/RW2/U2/RG1/PG0/PP0", "MX4/KB4/RW2/U4/RG1/PG0/PP0",
    ]  # fmt: skip
    assert [v.order for v in host] == list(range(6))
    assert host[4].params == {"mx": 4, "kb": 4, "rw": 2, "u": 2, "rg": 1, "pg": 0, "pp": 0}
    assert host[4].family == "tb-decode"
    # every invalid GPU point names the rule that removes it
    invalid = DECODE.invalid_points("cuda")
    # pp 0..17 (k3m added 6, k3i 7 and 8, k3q 9, the K phases 10, 11 and 12, x per launch 13-17), kb 1, 4, 5
    assert len(invalid) == 4 * 3 * 2 * 5 * 4 * 4 * 20 - 217 and all(p["rule"] for p in invalid)
    assert any(p["point"] == "MX4/KB1/RW1/U8/RG16/PG2/PP2" for p in DECODE.invalid_points("rocm"))
    assert any(p["point"] == "MX8/KB1/RW1/U4/RG1/PG0/PP1" and "mx != 8" in p["rule"] for p in invalid)
    assert any(p["point"] == "MX4/KB1/RW2/U2/RG1/PG0/PP2" for p in DECODE.invalid_points("rocm"))
    assert any(p["point"] == "MX4/KB1/RW1/U8/RG1/PG0/PP0" and "mx == 1 or" in p["rule"] for p in invalid)


def test_decode_source_default_list_is_the_gpu_space() -> None:
    """decode.hip's default TB_DECODE_VARIANTS (what `tunebase isa` sees in a plain build) = the space."""
    text = DECODE.sources("rocm")[0].read_text()
    start = text.index("#ifndef TB_DECODE_VARIANTS")
    block = text[start : text.index("#endif", start)]
    listed = re.findall(r"TB_DECODE_VARIANT\(([^)]*)\)", block)
    keys = ("mx", "kb", "rw", "u", "rg", "pg", "pp")
    assert [tuple(int(x) for x in item.split(",")) for item in listed] == [
        tuple(v.params[p] for p in keys) for v in DECODE.space("rocm")
    ]
    start = text.index("#define TB_DECODE_RING_VARIANTS")
    ring = re.findall(
        r"TB_DECODE_VARIANT\(([^)]*)\)", text[start : text.index("#define TB_DECODE_TC_VARIANTS", start)]
    )
    assert [tuple(int(x) for x in item.split(",")) for item in ring] == [
        tuple(v.params[p] for p in keys)
        for v in DECODE.space("cuda")
        if v.params["pp"] in (2, 3) and v.params["rg"] != 16
    ]
    start = text.index("#define TB_DECODE_TC_VARIANTS")
    tc = re.findall(
        r"TB_DECODE_VARIANT\(([^)]*)\)", text[start : text.index("#define TB_DECODE_STREAM_VARIANTS", start)]
    )
    assert [tuple(int(x) for x in item.split(",")) for item in tc] == [
        tuple(v.params[p] for p in keys) for v in DECODE.space("cuda") if v.params["rg"] == 16
    ]
    start = text.index("#define TB_DECODE_IW_VARIANTS")
    iw = re.findall(
        r"TB_DECODE_VARIANT\(([^)]*)\)", text[start : text.index("#define TB_DECODE_RING_VARIANTS", start)]
    )
    assert [tuple(int(x) for x in item.split(",")) for item in iw] == [
        tuple(v.params[p] for p in keys) for v in DECODE.space("cuda") if v.params["pp"] in (7, 8)
    ]
    start = text.index("#define TB_DECODE_STREAM_VARIANTS")
    stream = re.findall(
        r"TB_DECODE_VARIANT\(([^)]*)\)", text[start : text.index("#define TB_DECODE_FLAT_VARIANTS", start)]
    )
    assert [tuple(int(x) for x in item.split(",")) for item in stream] == [
        tuple(v.params[p] for p in keys) for v in DECODE.space("cuda") if v.params["pp"] in (5, 16, 18)
    ]
    start = text.index("#define TB_DECODE_FLAT_VARIANTS")
    flat = re.findall(
        r"TB_DECODE_VARIANT\(([^)]*)\)", text[start : text.index("#define TB_DECODE_SPLIT_VARIANTS", start)]
    )
    assert [tuple(int(x) for x in item.split(",")) for item in flat] == [
        tuple(v.params[p] for p in keys) for v in DECODE.space("cuda") if v.params["pp"] == 6
    ]
    start = text.index("#define TB_DECODE_SPLIT_VARIANTS")
    split = re.findall(r"TB_DECODE_VARIANT\(([^)]*)\)", text[start : text.index("#else", start)])
    assert [tuple(int(x) for x in item.split(",")) for item in split] == [
        tuple(v.params[p] for p in keys) for v in DECODE.space("cuda") if v.params["pp"] in (9, 17, 19)
    ]


def test_prefill_spaces() -> None:
    every = PREFILL.space("cuda")
    cuda = [v for v in every if v.params["engine"] == 0]
    assert len(cuda) == 156 and cuda[0].name == "N64/M64/W2x2/K4/S3/SK1/MB1/E0"
    # the wgmma engine: one m64 weight tile per warpgroup of 4 warps, m_tile tokens (the wgmma N), 1 block/SM
    wgmma = [v.params for v in every if v.params["engine"] == 1]
    assert len(wgmma) == 54  # 4 warpgroups only at kb 4 (NVRTC census)
    for p in wgmma:
        assert p["warps_n"] == 4 and p["n_tile"] == 64 * p["warps_m"] and p["min_blocks"] == 1
        assert p["m_tile"] >= 64 and p["warps_m"] * p["m_tile"] <= 256 and p["stages"] >= 3
    # the warp-specialised engine: 1 / 2 / 4 consumer warpgroups of 1 / 2 m64 tiles; 128 accumulators per
    # thread with one consumer (255 registers), 64 with more (168 / 96 registers: no setmaxnreg), but the WIDE
    # tile N256/M128/W4x4 (setmaxnreg: consumers at 112 registers): split-K 1 and stream-K
    ws = [v.params for v in every if v.params["engine"] == 2]
    assert len(ws) == 28 and len(every) == 242
    # engine 3: the WIDE tile in 2-CTA clusters (the activation tile multicast to both workgroups)
    assert sorted(v.name for v in every if v.params["engine"] == 3) == [
        "N256/M128/W4x4/K4/S3/SK0/MB1/E3", "N256/M128/W4x4/K4/S3/SK1/MB1/E3",
        "N256/M128/W4x4/K4/S4/SK0/MB1/E3", "N256/M128/W4x4/K4/S4/SK1/MB1/E3",
    ]  # fmt: skip
    # stream-K (split_k 0): engine 2 only, 16384-weight tiles with 2 / 4 consumers (one spills: NVRTC census)
    assert sorted(v.name for v in every if v.params["split_k"] == 0 and v.params["engine"] == 2) == [
        "N128/M128/W4x2/K4/S4/SK0/MB1/E2", "N256/M128/W4x4/K4/S3/SK0/MB1/E2",
        "N256/M128/W4x4/K4/S4/SK0/MB1/E2", "N256/M64/W4x2/K4/S3/SK0/MB1/E2",
        "N256/M64/W4x2/K4/S4/SK0/MB1/E2", "N256/M64/W4x4/K4/S4/SK0/MB1/E2",
    ]  # fmt: skip
    wide = sorted(
        v.name for v in every if v.params["engine"] == 2 and v.params["n_tile"] * v.params["m_tile"] > 16384
    )
    assert wide == [
        "N256/M128/W4x4/K4/S3/SK0/MB1/E2", "N256/M128/W4x4/K4/S3/SK1/MB1/E2",
        "N256/M128/W4x4/K4/S4/SK0/MB1/E2", "N256/M128/W4x4/K4/S4/SK1/MB1/E2",
    ]  # fmt: skip
    for p in ws:
        tiles = p["n_tile"] // (64 * p["warps_m"])
        assert tiles in (1, 2) and tiles * p["m_tile"] * p["warps_m"] <= 512
        assert (p["kb"], p["min_blocks"], p["warps_n"]) == (4, 1, 4) and p["stages"] in (3, 4)
    assert {(p["n_tile"], p["m_tile"], p["warps_m"]) for p in ws} == {
        (64, 128, 1), (128, 128, 1), (128, 128, 2), (256, 64, 2), (256, 64, 4), (256, 128, 4),
    }  # fmt: skip
    # NVIDIA warp tiles are 32 or 64 wide in both directions; 4 or 8 warps
    for v in cuda:
        p = v.params
        assert p["n_tile"] // p["warps_n"] in (32, 64) and p["m_tile"] // p["warps_m"] in (32, 64)
        assert p["warps_n"] * p["warps_m"] in (4, 8)
        assert p["min_blocks"] == 1 or (p["warps_n"] * p["warps_m"], p["n_tile"] // p["warps_n"]) == (8, 32)
    rocm = PREFILL.space("rocm")
    assert len(rocm) == 84 and all(v.params["stages"] == 2 for v in rocm)
    assert [v.name for v in PREFILL.space("host")] == [
        "N64/M32/W2x2/K4/S2/SK1/MB1/E0", "N64/M64/W2x2/K4/S2/SK1/MB1/E0",
        "N128/M32/W2x2/K4/S2/SK1/MB1/E0", "N128/M64/W2x2/K4/S2/SK1/MB1/E0",
    ]  # fmt: skip
    invalid = {p["point"]: p["rule"] for p in PREFILL.invalid_points("cuda")}
    assert "n_tile // warps_n in (32, 64)" in invalid["N256/M32/W2x2/K4/S2/SK1/MB1/E0"]
    assert (
        "stages == 2"
        in {p["point"]: p["rule"] for p in PREFILL.invalid_points("rocm")}["N64/M64/W2x2/K4/S3/SK1/MB1/E0"]
    )
    rocm_invalid = {p["point"]: p["rule"] for p in PREFILL.invalid_points("rocm")}
    assert "backend == 'cuda'" in rocm_invalid["N64/M64/W4x1/K4/S2/SK1/MB1/E1"]
    assert "warps_m * m_tile <= 256" in invalid["N256/M128/W4x4/K4/S3/SK1/MB1/E1"]
    assert "backend == 'cuda'" in rocm_invalid["N128/M128/W4x2/K4/S2/SK1/MB1/E2"]
    assert "64 * warps_m" in invalid["N256/M128/W4x1/K4/S3/SK1/MB1/E2"]  # 4 m64 tiles, 256 accumulators
    assert "16384" in invalid["N256/M128/W4x2/K4/S3/SK1/MB1/E2"]  # 128 accumulators at 168 registers
    # 64 accumulators at 96 registers spill; the WIDE tile (setmaxnreg) only at split-K 1 and stream-K
    assert "split_k <= 1" in invalid["N256/M128/W4x4/K4/S3/SK2/MB1/E2"]
    assert "kb == 4" in invalid["N128/M128/W4x2/K8/S3/SK1/MB1/E2"]
    assert "split_k >= 1" in invalid["N128/M128/W4x1/K4/S4/SK0/MB1/E2"]  # 255 registers + 144 bytes of spills
    assert "split_k >= 1" in invalid["N128/M128/W4x2/K4/S3/SK0/MB1/E1"]
    assert all(v.params["split_k"] >= 1 for b in ("rocm", "host") for v in PREFILL.space(b))


def test_prefill_point_rules_carry_reasons() -> None:
    """Rules over the format, K, and the shared memory a variant needs are checked per task."""
    h200 = DeviceFacts("cuda", "sm_90", 132, 32)
    # stream-K N256/M64/W4x2 spills (NVRTC census) where the format's unpack needs more registers
    sk0 = PREFILL.parse("N256/M64/W4x2/K4/S4/SK0/MB1/E2", "cuda")
    for fmt, ok in (("Q4_0", True), ("Q4_K", True), ("Q6_K", False), ("Q5_1", False)):
        problems = PREFILL.point_problems(PREFILL.bindings(sk0, 4096, 4096, 128, FORMATS[fmt], h200))
        assert (problems == []) is ok, (fmt, problems)
    q6 = PREFILL.bindings(
        PREFILL.parse("N128/M64/W4x2/K4/S3/SK1/MB1/E0", "cuda"), 4096, 5120, 512, FORMATS["Q6_K"], h200
    )
    assert PREFILL.point_problems(q6) == []
    odd_k = PREFILL.bindings(
        PREFILL.parse("N128/M64/W4x2/K4/S3/SK1/MB1/E0", "cuda"), 4096, 4160, 512, FORMATS["Q8_0"], h200
    )
    assert PREFILL.point_problems(odd_k) == ["k % (block_weights if backend == 'host' else 256) == 0"]
    big = PREFILL.bindings(
        PREFILL.parse("N64/M128/W2x2/K8/S4/SK1/MB1/E0", "cuda"), 4096, 4096, 512, FORMATS["Q8_0"], h200
    )
    assert as_int(big["smem"]) > 232448  # (it breaks a no-spill rule of Q8_0 too: kb 8 with a 2048 warp tile)
    assert "backend != 'cuda' or smem <= 232448" in PREFILL.point_problems(big)
    mi100 = DeviceFacts("rocm", "gfx906", 60, 64)
    lds = PREFILL.bindings(
        PREFILL.parse("N128/M64/W2x2/K8/S2/SK1/MB1/E0", "rocm"), 4096, 4096, 512, FORMATS["Q8_0"], mi100
    )
    assert "smem <= (163840 if arch == 'gfx950' else 65536)" in PREFILL.point_problems(lds)[0]


@pytest.mark.parametrize("package", [DECODE, PREFILL], ids=lambda p: p.name)
def test_parse_roundtrip(package: object) -> None:
    for backend in ("host", "rocm", "cuda"):
        for v in package.space(backend):  # type: ignore[attr-defined]
            assert package.parse(v.name, backend) == v  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("package", "name", "backend", "reason"),
    [
        (DECODE, "MX1/KB3/RW1/U4/RG1/PG0/PP0", "rocm", "kb must be one of 1,4"),
        (DECODE, "MX3/KB1/RW1/U4/RG1/PG0/PP0", "cuda", "mx must be one of 1,2,4,8"),
        (DECODE, "MX2/KB1/RW1/U4/RG1/PG0/PP0", "cuda", "mx != 2 or (kb == 1 and pg > 0)"),
        (DECODE, "MX4/KB1/RW1/U4/RG1/PG4/PP0", "cuda", "pg < 4 or (mx == 1 and rw == 1)"),
        (
            DECODE,
            "MX1/KB1/RW1/U4/RG1/PG0/PP0",
            "host",
            "breaks restriction(s) for host: backend != 'host' or (mx == 4",
        ),
        (DECODE, "MX4/KB4/RW1/U4/RG1/PG2/PP0", "cuda", "pg == 0 or (kb == 1 and rg != 2)"),
        (DECODE, "MX4/KB1/RW1/U8/RG16/PG2/PP2", "rocm", "rg != 16 or (backend == 'cuda'"),
        (DECODE, "MX8/KB1/RW1/U4/RG1/PG0/PP1", "cuda", "mx != 8 or rg == 16"),
        (DECODE, "MX1/KB04/RW1/U4/RG1/PG0/PP0", "rocm", "not canonical; write MX1/KB4/RW1/U4/RG1/PG0/PP0"),
        (DECODE, "kb8/tw8", "rocm", "expected MX{mx}/KB{kb}/RW{rw}/U{u}/RG{rg}/PG{pg}/PP{pp}"),
        (DECODE, "N128/MT32/MB1/U4", "rocm", "not a tb-decode variant name"),
        (DECODE, "MX1/KB4/RW1/U4/RG1/PG0/PP0", "vulkan", "no space for backend 'vulkan'"),
        (PREFILL, "N128/M64/W2x2/K4/S3/SK1/MB1/E0", "rocm", "stages == 2"),
        (PREFILL, "N96/M32/W2x2/K4/S2/SK1/MB1/E0", "cuda", "n_tile must be one of 64,128,256"),
        (PREFILL, "N64/M32/W2x2/K4/S2/SK2/MB1/E0", "host", "min_blocks, engine) == (2, 2, 4, 2, 1, 1, 0)"),
        (PREFILL, "KB8/TW8", "rocm", "not a tb-prefill variant name"),
    ],
)
def test_parse_errors_carry_reasons(package: object, name: str, backend: str, reason: str) -> None:
    with pytest.raises(InvalidVariant) as info:
        package.parse(name, backend)  # type: ignore[attr-defined]
    assert reason in str(info.value)


def test_family_for_phase_is_the_builtin_package() -> None:
    assert family_for_phase("decode") is DECODE and family_for_phase("prefill") is PREFILL
    with pytest.raises(KeyError, match="known phases: decode, prefill"):
        family_for_phase("training")


@pytest.mark.parametrize("wave", [32, 64])
@pytest.mark.parametrize(
    ("n", "k", "m"), [(17408, 5120, 1), (1024, 5120, 4), (67, 256, 2), (248320, 5120, 3)]
)
def test_decode_launch_covers_every_row_once(wave: int, n: int, k: int, m: int) -> None:
    device = DeviceFacts("rocm", "gfx906", 60, wave)
    runnable = 0
    for v in DECODE.space("rocm"):
        values = DECODE.bindings(v, n, k, m, FORMATS["Q4_0"], device)
        geometry = DECODE.geometry(values)
        p = v.params
        rows_wg = (256 // wave) * p["rg"] * p["rw"]
        tiles = as_int(values["tiles"])
        assert geometry.block == (256, 1, 1) and geometry.shared_bytes == 0
        assert geometry.grid[1] == p["kb"] and geometry.grid[2] == 1
        assert tiles == math.ceil(n / rows_wg) and (tiles - 1) * rows_wg < n
        if p["pg"]:  # persistent: at most pg workgroups per CU, each strides over the tiles
            assert geometry.grid[0] == min(tiles, p["pg"] * 60)
        else:
            assert geometry.grid[0] == tiles
        problems = DECODE.point_problems(values)
        if m > p["mx"]:
            assert "backend == 'host' or m <= mx" in problems
        slice_w = math.ceil(k // 32 / p["kb"]) * 32
        fits = m * slice_w * 5 // 4 <= p["mx"] * {1: 10240, 2: 10240, 4: 6144, 8: 3072}[p["kb"]]
        assert fits == (not any("fits" in q or "5 // 4" in q for q in problems))
        runnable += not problems
    assert runnable >= 3  # every shape keeps several variants


def test_decode_point_rules_reject_large_m() -> None:
    v = DECODE.parse("MX4/KB1/RW1/U4/RG1/PG0/PP0", "cuda")
    values = DECODE.bindings(v, 64, 256, 5, FORMATS["Q8_0"], DeviceFacts("cuda", "sm_90", 132, 32))
    assert DECODE.point_problems(values) == ["backend == 'host' or m <= mx"]
    m1 = DECODE.parse("MX1/KB1/RW1/U4/RG1/PG0/PP0", "cuda")
    values = DECODE.bindings(m1, 64, 256, 2, FORMATS["Q8_0"], DeviceFacts("cuda", "sm_90", 132, 32))
    assert DECODE.point_problems(values) == ["backend == 'host' or m <= mx"]


def test_prefill_launch_tiles() -> None:
    v = PREFILL.parse("N128/M64/W4x2/K4/S3/SK2/MB1/E0", "cuda")
    values = PREFILL.bindings(v, 17408, 5120, 600, FORMATS["Q4_0"], DeviceFacts("cuda", "sm_90", 132, 32))
    g = PREFILL.geometry(values)
    assert g.grid == (136, 10, 2) and g.block == (256, 1, 1) and g.shared_bytes == as_int(values["smem"])
    pre = PREFILL.prelaunch_geometry(values)
    assert pre.block == (256, 1, 1) and pre.grid == ((600 * 17408 // 4 + 255) // 256, 1, 1)
    assert PREFILL.prelaunch_symbol(v) == "tb_prefill_prep_sk2"
    (ws,) = [a for a in PREFILL.args_for("cuda") if a.role == "workspace"]
    assert parse(ws.size or "").evaluate_int(values) == 608 * 5120 * 2 + 160 * 608 * 16


def test_prefill_wgmma_launch() -> None:
    """Engine 1: 128 threads per warpgroup, the prelaunch's grid.y = 2 selects the fp16 activations, the
    stage holds the fp16 token tile (TbpWgLayout) instead of int8 rows and records."""
    v = PREFILL.parse("N128/M128/W4x2/K4/S3/SK1/MB1/E1", "cuda")
    values = PREFILL.bindings(v, 17408, 5120, 2048, FORMATS["Q4_0"], DeviceFacts("cuda", "sm_90", 132, 32))
    g = PREFILL.geometry(values)
    assert g.grid == (16, 136, 1) and g.block == (256, 1, 1)  # token tiles along x
    assert PREFILL.prelaunch_geometry(values).grid == (2048 * 5120 // 4 // 256, 2, 1)
    assert PREFILL.symbol(v) == "tb_prefill_n128_m128_wn4_wm2_kb4_s3_sk1_mb1_e1"
    # 3 stages x (128 tokens x 128 halves + 128 rows x (64 + 16 payload + 16 scale bytes)) + decoded scales
    assert as_int(values["smem"]) == 3 * (128 * 4 * 64 + 128 * (64 + 16 + 16)) + 4 * 128 * 2 * 4
    (ws,) = [a for a in PREFILL.args_for("cuda") if a.role == "workspace"]
    assert parse(ws.size or "").evaluate_int(values) >= 2048 * 5120 * 2
    assert [a.role for a in PREFILL.args_for("host")] == ["weights"] * 3 + ["x", "y", "m", "n", "k"]


def test_prefill_stream_k_launch() -> None:
    """Engine 2's stream-K (SK0): one workgroup per SM (the device's cus) whatever the shape, and the
    prelaunch zeroes y (pieces of tiles add into it) under its own symbol."""
    v = PREFILL.parse("N256/M64/W4x2/K4/S4/SK0/MB1/E2", "cuda")
    for m in (128, 2048):
        values = PREFILL.bindings(v, 17408, 5120, m, FORMATS["Q4_0"], DeviceFacts("cuda", "sm_90", 132, 32))
        assert PREFILL.point_problems(values) == []
        assert PREFILL.geometry(values).grid == (132, 1, 1) and PREFILL.geometry(values).block == (384, 1, 1)
        pre = PREFILL.prelaunch_geometry(values)
        assert pre.grid == ((m * 17408 // 4 + 255) // 256, 2, 1)  # the y cells (M * N / 4 > M * K / 4)
    assert PREFILL.prelaunch_symbol(v) == "tb_prefill_prep_sk0"
    assert PREFILL.symbol(v) == "tb_prefill_n256_m64_wn4_wm2_kb4_s4_sk0_mb1_e2"


@pytest.mark.parametrize("package", [DECODE, PREFILL], ids=lambda p: p.name)
def test_hip_source_comment_lists_the_manifest_arguments(package: object) -> None:
    """The ABI comment block at the top of the HIP source names the manifest's [[args]] in order."""
    text = (package.sources("rocm")[0]).read_text()  # type: ignore[attr-defined]
    params = re.search(r"#define TB_(?:DECODE|PREFILL)_PARAMS(.*?)\n\n", text, re.S)
    assert params is not None
    names = re.findall(r"(\w+)\s*(?:,|\\|$)", params.group(1).replace("__restrict__", ""))
    roles = []
    for arg in package.args_for("rocm"):  # type: ignore[attr-defined]
        roles.append(arg.part or arg.name or arg.role)
    assert [n for n in names if n in roles] == roles


def test_one_unit_per_format_with_one_symbol_per_variant() -> None:
    units = compile_units(DECODE, "Q4_K", "rocm", DECODE.space("rocm"))
    assert len(units) == 1
    defines = units[0].defines
    assert defines["TB_FMT_Q4_K"] == "1" and defines["TB_QBITS"] == "4" and defines["TB_SC_BYTES"] == "16"
    assert "TB_ASYMMETRIC" not in defines
    # each format is its own unit (tb-split: the arrays differ even where the shapes agree)
    others = [compile_units(DECODE, f, "rocm", DECODE.space("rocm"))[0].defines for f in ("Q4_0", "IQ4_NL")]
    assert others[0] != others[1] and defines not in others
    assert defines["TB_DECODE_VARIANTS"].count("TB_DECODE_VARIANT(") == 68  # rocm: no cp.async ring
    assert " " not in defines["TB_DECODE_VARIANTS"]
    assert set(units[0].symbols(DECODE).values()) == {
        "tb_decode_mx{mx}_kb{kb}_rw{rw}_u{u}_rg{rg}_pg{pg}_pp{pp}".format(**v.params)
        for v in DECODE.space("rocm")
    }
    assert all((LIBRARY / p.name).is_dir() for p in (DECODE, PREFILL))
