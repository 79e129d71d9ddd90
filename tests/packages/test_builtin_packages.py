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
    assert len(gpu) == 20 and [v.name for v in DECODE.space("cuda")] == [v.name for v in gpu]
    assert gpu[0].name == "KB1/TW4" and gpu[-1].name == "KB16/TW24"
    host = DECODE.space("host")
    assert [v.name for v in host] == [
        "KB1/TW4", "KB1/TW8", "KB2/TW4", "KB2/TW8", "KB4/TW4", "KB4/TW8", "KB8/TW4", "KB8/TW8",
    ]  # fmt: skip
    assert [v.order for v in host] == list(range(8))
    assert host[5].params == {"kb": 4, "tw": 8} and host[5].family == "tb-decode"


def test_prefill_spaces() -> None:
    cuda = PREFILL.space("cuda")
    assert len(cuda) == 288 and cuda[0].name == "N64/M64/W2x2/K4/S2/SK1/MB1"
    # NVIDIA warp tiles are 32 or 64 wide in both directions; 4 or 8 warps
    for v in cuda:
        p = v.params
        assert p["n_tile"] // p["warps_n"] in (32, 64) and p["m_tile"] // p["warps_m"] in (32, 64)
        assert p["warps_n"] * p["warps_m"] in (4, 8)
        assert p["min_blocks"] == 1 or (p["warps_n"] * p["warps_m"], p["n_tile"] // p["warps_n"]) == (8, 32)
    rocm = PREFILL.space("rocm")
    assert len(rocm) == 84 and all(v.params["stages"] == 2 for v in rocm)
    assert [v.name for v in PREFILL.space("host")] == [
        "N64/M32/W2x2/K4/S2/SK1/MB1", "N64/M64/W2x2/K4/S2/SK1/MB1",
        "N128/M32/W2x2/K4/S2/SK1/MB1", "N128/M64/W2x2/K4/S2/SK1/MB1",
    ]  # fmt: skip
    invalid = {p["point"]: p["rule"] for p in PREFILL.invalid_points("cuda")}
    assert "n_tile // warps_n in (32, 64)" in invalid["N256/M32/W2x2/K4/S2/SK1/MB1"]
    assert (
        "stages == 2"
        in {p["point"]: p["rule"] for p in PREFILL.invalid_points("rocm")}["N64/M64/W2x2/K4/S3/SK1/MB1"]
    )


def test_prefill_point_rules_carry_reasons() -> None:
    """Rules over the format, K, and the shared memory a variant needs are checked per task."""
    h200 = DeviceFacts("cuda", "sm_90", 132, 32)
    q6 = PREFILL.bindings(
        PREFILL.parse("N128/M64/W4x2/K4/S3/SK1/MB1", "cuda"), 4096, 5120, 512, FORMATS["Q6_K"], h200
    )
    assert PREFILL.point_problems(q6) == []
    odd_k = PREFILL.bindings(
        PREFILL.parse("N128/M64/W4x2/K4/S3/SK1/MB1", "cuda"), 4096, 4160, 512, FORMATS["Q8_0"], h200
    )
    assert PREFILL.point_problems(odd_k) == ["k % (block_weights if backend == 'host' else 256) == 0"]
    big = PREFILL.bindings(
        PREFILL.parse("N256/M128/W4x2/K8/S4/SK1/MB1", "cuda"), 4096, 4096, 512, FORMATS["Q8_0"], h200
    )
    assert as_int(big["smem"]) > 232448 and PREFILL.point_problems(big) == [
        "backend != 'cuda' or smem <= 232448"
    ]
    mi100 = DeviceFacts("rocm", "gfx906", 60, 64)
    lds = PREFILL.bindings(
        PREFILL.parse("N128/M64/W2x2/K8/S2/SK1/MB1", "rocm"), 4096, 4096, 512, FORMATS["Q8_0"], mi100
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
        (DECODE, "KB3/TW8", "rocm", "KB3/TW8: kb must be one of 1,2,4,8,16"),
        (DECODE, "KB8/TW6", "cuda", "tw must be one of 4,8,12,24"),
        (DECODE, "KB16/TW8", "host", "breaks restriction(s) for host: backend != 'host' or (kb <= 8"),
        (DECODE, "KB08/TW8", "rocm", "not canonical; write KB8/TW8"),
        (DECODE, "kb8/tw8", "rocm", "expected KB{kb}/TW{tw}"),
        (DECODE, "N128/MT32/MB1/U4", "rocm", "not a tb-decode variant name"),
        (DECODE, "KB8/TW8", "vulkan", "no space for backend 'vulkan'"),
        (PREFILL, "N128/M64/W2x2/K4/S3/SK1/MB1", "rocm", "stages == 2"),
        (PREFILL, "N96/M32/W2x2/K4/S2/SK1/MB1", "cuda", "n_tile must be one of 64,128,256"),
        (PREFILL, "N64/M32/W2x2/K4/S2/SK2/MB1", "host", "split_k == 1"),
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
    v = PREFILL.parse("N128/M64/W4x2/K4/S3/SK2/MB1", "cuda")
    values = PREFILL.bindings(v, 17408, 5120, 600, FORMATS["Q4_0"], DeviceFacts("cuda", "sm_90", 132, 32))
    g = PREFILL.geometry(values)
    assert g.grid == (136, 10, 2) and g.block == (256, 1, 1) and g.shared_bytes == as_int(values["smem"])
    pre = PREFILL.prelaunch_geometry(values)
    assert pre.block == (256, 1, 1) and pre.grid == ((600 * 17408 // 4 + 255) // 256, 1, 1)
    assert PREFILL.prelaunch_symbol(v) == "tb_prefill_prep_sk2"
    (ws,) = [a for a in PREFILL.args_for("cuda") if a.role == "workspace"]
    assert parse(ws.size or "").evaluate_int(values) == 608 * 5120 + 160 * 608 * 16
    assert [a.role for a in PREFILL.args_for("host")] == ["weights"] * 3 + ["x", "y", "m", "n", "k"]


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
