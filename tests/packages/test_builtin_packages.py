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
    assert len(gpu) == 20 and [v.name for v in DECODE.space("cuda")] == [v.name for v in gpu]
    assert gpu[0].name == "KB1/TW4" and gpu[-1].name == "KB16/TW24"
    host = DECODE.space("host")
    assert [v.name for v in host] == [
        "KB1/TW4", "KB1/TW8", "KB2/TW4", "KB2/TW8", "KB4/TW4", "KB4/TW8", "KB8/TW4", "KB8/TW8",
    ]  # fmt: skip
    assert [v.order for v in host] == list(range(8))
    assert host[5].params == {"kb": 4, "tw": 8} and host[5].family == "tb-decode"


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
        (DECODE, "KB3/TW8", "rocm", "KB3/TW8: kb must be one of 1,2,4,8,16"),
        (DECODE, "KB8/TW6", "cuda", "tw must be one of 4,8,12,24"),
        (DECODE, "KB16/TW8", "host", "breaks restriction(s) for host: backend != 'host' or (kb <= 8"),
        (DECODE, "KB08/TW8", "rocm", "not canonical; write KB8/TW8"),
        (DECODE, "kb8/tw8", "rocm", "expected KB{kb}/TW{tw}"),
        (DECODE, "N128/MT32/MB1/U4", "rocm", "not a tb-decode variant name"),
        (DECODE, "KB8/TW8", "vulkan", "no space for backend 'vulkan'"),
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
    for v in DECODE.space("rocm"):
        values = DECODE.bindings(v, n, k, m, FORMATS["Q4_0"], device)
        geometry = DECODE.geometry(values)
        kb, tw, rows_per_wave = v.params["kb"], v.params["tw"], as_int(values["rows_per_wave"])
        assert geometry.block == (256, 1, 1) and geometry.shared_bytes == 0
        assert geometry.grid[1] == kb and geometry.grid[2] == 1
        rows_per_wg = rows_per_wave * 256 // wave
        assert geometry.grid[0] == math.ceil(n / rows_per_wg) and (geometry.grid[0] - 1) * rows_per_wg < n
        waves = geometry.grid[0] * geometry.grid[1] * 256 // wave
        assert waves >= min(tw * 60, math.ceil(n / rows_per_wave))  # the occupancy target is met
        assert DECODE.point_problems(values) == []


def test_decode_point_rules_reject_large_m() -> None:
    v = DECODE.parse("KB1/TW4", "cuda")
    values = DECODE.bindings(v, 64, 256, 5, FORMATS["Q8_0"], DeviceFacts("cuda", "sm_90", 132, 32))
    assert DECODE.point_problems(values) == ["backend == 'host' or m <= 4"]


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
    assert units[0].defines["TB_ASYMMETRIC"] == "1" and "TB_FMT_Q4_K" not in units[0].defines
    assert compile_units(DECODE, "Q4_1", "rocm", DECODE.space("rocm"))[0].defines == units[0].defines
    assert units[0].defines["TB_DECODE_VARIANTS"].count("TB_DECODE_VARIANT(") == 20
    assert " " not in units[0].defines["TB_DECODE_VARIANTS"]
    assert set(units[0].symbols(DECODE).values()) == {
        f"tb_decode_kb{v.params['kb']}_tw{v.params['tw']}" for v in DECODE.space("rocm")
    }
    assert all((LIBRARY / p.name).is_dir() for p in (DECODE, PREFILL))
