"""The built-in families are packages (kernels/library): their spaces, names, rules and launch geometry."""

from __future__ import annotations

import math
import re

import pytest

from kernels.families import family_for_phase
from kernels.families.base import InvalidVariant
from kernels.formats.registry import FORMATS
from kernels.packages.build import compile_units
from kernels.packages.expressions import as_int
from kernels.packages.loader import LIBRARY, builtin_packages
from kernels.packages.package import DeviceFacts

DECODE = builtin_packages()["tb-decode"]
PREFILL = builtin_packages()["tb-prefill"]


def test_decode_spaces() -> None:
    gpu = DECODE.space("rocm")
    assert len(gpu) == 42 and [v.name for v in DECODE.space("cuda")] == [v.name for v in gpu]
    assert gpu[0].name == "MX1/KB1/RW1/U2/RG1/PG0/PP1" and gpu[-1].name == "MX4/KB4/RW2/U2/RG1/PG0/PP1"
    assert sum(v.params["pp"] for v in gpu) == 24  # the pipelined kernel, beside 18 single-buffered points
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
    assert len(invalid) == 2 * 4 * 2 * 3 * 2 * 2 * 2 - 42 and all(p["rule"] for p in invalid)
    assert any(p["point"] == "MX4/KB1/RW1/U8/RG1/PG0/PP0" and "mx == 1 or" in p["rule"] for p in invalid)


def test_decode_source_default_list_is_the_gpu_space() -> None:
    """decode.hip's default TB_DECODE_VARIANTS (what `tunebase isa` sees in a plain build) = the space."""
    text = DECODE.sources("rocm")[0].read_text()
    start = text.index("#ifndef TB_DECODE_VARIANTS")
    block = text[start : text.index("#endif", start)]
    listed = re.findall(r"TB_DECODE_VARIANT\(([^)]*)\)", block)
    assert [tuple(int(x) for x in item.split(",")) for item in listed] == [
        tuple(v.params[p] for p in ("mx", "kb", "rw", "u", "rg", "pg", "pp")) for v in DECODE.space("rocm")
    ]


def test_prefill_spaces() -> None:
    gpu = PREFILL.space("rocm")
    assert len(gpu) == 2 * 3 * 2 * 4 - 2 * 4  # minus N128/MT64 x MB x U
    assert gpu[0].name == "N64/MT16/MB1/U0" and gpu[-1].name == "N128/MT32/MB2/U4"
    assert not any(v.name.startswith("N128/MT64") for v in gpu)
    assert gpu[5].params == {"n_tile": 64, "m_tile": 16, "min_blocks": 2, "unroll": 1}
    assert [v.name for v in PREFILL.space("host")] == [
        "N64/MT16/MB1/U0", "N64/MT16/MB1/U2", "N64/MT32/MB1/U0", "N64/MT32/MB1/U2",
        "N128/MT16/MB1/U0", "N128/MT16/MB1/U2", "N128/MT32/MB1/U0", "N128/MT32/MB1/U2",
    ]  # fmt: skip
    invalid = PREFILL.invalid_points("cuda")
    assert {p["point"] for p in invalid} == {f"N128/MT64/MB{mb}/U{u}" for mb in (1, 2) for u in (0, 1, 2, 4)}
    assert all("n_tile == 128 and m_tile == 64" in p["rule"] for p in invalid)


@pytest.mark.parametrize("package", [DECODE, PREFILL], ids=lambda p: p.name)
def test_parse_roundtrip(package: object) -> None:
    for backend in ("host", "rocm", "cuda"):
        for v in package.space(backend):  # type: ignore[attr-defined]
            assert package.parse(v.name, backend) == v  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("package", "name", "backend", "reason"),
    [
        (DECODE, "MX1/KB3/RW1/U4/RG1/PG0/PP0", "rocm", "kb must be one of 1,2,4,8"),
        (DECODE, "MX2/KB1/RW1/U4/RG1/PG0/PP0", "cuda", "mx must be one of 1,4"),
        (
            DECODE,
            "MX1/KB1/RW1/U4/RG1/PG0/PP0",
            "host",
            "breaks restriction(s) for host: backend != 'host' or (mx == 4",
        ),
        (DECODE, "MX4/KB2/RW1/U4/RG1/PG2/PP0", "cuda", "pg == 0 or (kb == 1 and rg == 1)"),
        (DECODE, "MX1/KB08/RW1/U4/RG1/PG0/PP0", "rocm", "not canonical; write MX1/KB8/RW1/U4/RG1/PG0/PP0"),
        (DECODE, "kb8/tw8", "rocm", "expected MX{mx}/KB{kb}/RW{rw}/U{u}/RG{rg}/PG{pg}/PP{pp}"),
        (DECODE, "N128/MT32/MB1/U4", "rocm", "not a tb-decode variant name"),
        (DECODE, "MX1/KB8/RW1/U4/RG1/PG0/PP0", "vulkan", "no space for backend 'vulkan'"),
        (PREFILL, "N128/MT64/MB1/U0", "rocm", "not (n_tile == 128 and m_tile == 64)"),
        (PREFILL, "N96/MT32/MB1/U0", "cuda", "n_tile must be one of 64,128"),
        (PREFILL, "N64/MT16/MB2/U0", "host", "min_blocks == 1"),
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
    v = PREFILL.parse("N128/MT32/MB1/U4", "rocm")
    values = PREFILL.bindings(v, 17408, 5120, 600, FORMATS["Q4_0"], DeviceFacts("rocm", "gfx942", 304, 64))
    g = PREFILL.geometry(values)
    assert g.grid == (136, 19, 1) and g.block == (256, 1, 1) and g.shared_bytes == 0


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
    assert defines["TB_DECODE_VARIANTS"].count("TB_DECODE_VARIANT(") == 42
    assert " " not in defines["TB_DECODE_VARIANTS"]
    assert set(units[0].symbols(DECODE).values()) == {
        "tb_decode_mx{mx}_kb{kb}_rw{rw}_u{u}_rg{rg}_pg{pg}_pp{pp}".format(**v.params)
        for v in DECODE.space("rocm")
    }
    assert all((LIBRARY / p.name).is_dir() for p in (DECODE, PREFILL))
