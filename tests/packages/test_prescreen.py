"""ISA pre-screen without a GPU: `POST /v1/kernels/{name}/{version}/analyze` compiles real variants with hipcc
(gfx906) and ziglang's clang 22 (gfx950), stores per-variant resources, reports compile errors per variant,
and `skip_spilling` sweeps leave out the variants whose stored analysis spills.

CI cost is kept small: a handful of variants of one format per arch, never the whole space.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from kernels.packages.build import compile_units
from kernels.packages.loader import builtin_packages, load_folder
from service.db.models import Task
from tests.packages.conftest import PACKAGE_DIR, Api, package_archive, stored_counts
from workers.compilers import compiler_for_arch
from workers.isa.analyze import analyze_bytes
from workers.prescreen import analyse_package

GZIP = {"Content-Type": "application/gzip"}
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
COMPARED = [
    "vgpr",
    "agpr",
    "sgpr",
    "lds_bytes",
    "scratch_bytes",
    "vgpr_spills",
    "sgpr_spills",
    "waves_per_simd",
]
COMPARED.append("limiter")


def isa_reports(arch: str, variants: list[str], fmt: str = "Q8_0") -> dict[str, dict[str, Any]]:
    """What `tunebase isa` says about tb-decode's variants compiled on their own (the independent check)."""
    package = builtin_packages()["tb-decode"]
    chosen = [v for v in package.space("rocm") if v.name in variants]
    (unit,) = compile_units(package, fmt, "rocm", chosen)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "unit.co"
        result = compiler_for_arch(arch).compile(unit.source, arch, unit.defines, out)
        assert result.ok, result.log
        reports = {r["name"]: r for r in analyze_bytes(out.read_bytes())}
    return {v.name: reports[package.symbol(v)] for v in chosen}


@SQLITE_ONLY
def test_builtin_decode_is_analysed_for_gfx906_and_gfx950(api: Api) -> None:
    version = builtin_packages()["tb-decode"].version
    for arch, variants, engine in (
        ("gfx906", ["MX1/KB1/RW1/U4/RG1/PG0/PP0"], "objdump"),
        ("gfx950", ["MX1/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB4/RW2/U2/RG1/PG0/PP1"], "llvm22"),
    ):
        body = {"arch": arch, "formats": ["Q8_0"], "variants": variants}
        response = api.http.post(f"/v1/kernels/tb-decode/{version[:12]}/analyze", json=body)
        assert response.status_code == 200, response.text
        result = response.json()
        assert result["version"] == version and result["arch"] == arch
        assert result["analysed"] == len(variants) and result["failed"] == 0
        assert result["toolchain"].startswith(
            "hipcc: " if arch == "gfx906" else "zig-clang: clang version 22"
        )
        expected = isa_reports(arch, variants)
        for item in result["items"]:
            r = item["resources"]
            assert item["ok"] and item["error"] is None and item["format"] == "Q8_0"
            assert {key: r[key] for key in COMPARED} == {
                key: expected[item["variant"]][key] for key in COMPARED
            }
            assert r["vgpr"] > 0 and r["sgpr"] > 0 and r["lds_bytes"] > 0 and r["workgroup_size"] == 256
            assert r["disassembler"] == engine  # gfx950 disassembles through rocm-llvm-python's LLVM 22
            assert r["census"]["kernel"]["total"] > 100 and r["census"]["kernel"]["v_dot4"] > 0  # tb_dot4
        stored = api.http.get(f"/v1/kernels/tb-decode/{version[:8]}", params={"arch": arch}).json()[
            "analyses"
        ]
        assert [(a["variant"], a["resources"]) for a in stored] == [
            (i["variant"], i["resources"]) for i in result["items"]
        ]
    assert stored_counts(api.url) == (0, 3)


def test_analyses_of_a_pushed_package_are_stored_and_replaced(api: Api) -> None:
    version = api.http.post("/v1/kernels", content=package_archive(), headers=GZIP).json()["version"]
    path = f"/v1/kernels/q8-rows/{version[:12]}/analyze"
    first = api.http.post(path, json={"arch": "gfx950", "variants": ["R1/V0"]})
    assert first.status_code == 200, first.text
    (item,) = first.json()["items"]
    assert item["ok"] and item["resources"]["vgpr"] > 0 and item["resources"]["disassembler"] == "llvm22"
    stored = api.http.get(f"/v1/kernels/q8-rows/{version}").json()["analyses"]
    assert [(a["arch"], a["variant"], a["resources"]) for a in stored] == [
        ("gfx950", "R1/V0", item["resources"])
    ]
    again = api.http.post(path, json={"arch": "gfx950", "variants": ["R1/V0"]})
    assert again.status_code == 200 and stored_counts(api.url) == (1, 1)
    restored = api.http.get(f"/v1/kernels/q8-rows/{version}").json()["analyses"]
    assert restored[0]["created_at"] >= stored[0]["created_at"]


@SQLITE_ONLY
def test_a_variant_that_does_not_compile_is_reported_and_the_others_analysed(api: Api) -> None:
    pushed = api.http.post("/v1/kernels", content=package_archive(), headers=GZIP).json()
    body = {"arch": "gfx906", "variants": ["R1/V0", "R8/V0", "R4/V24"]}
    response = api.http.post(f"/v1/kernels/q8-rows/{pushed['version'][:12]}/analyze", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert (result["analysed"], result["failed"], result["spilling"]) == (2, 1, 1)
    items = {i["variant"]: i for i in result["items"]}
    broken = items["R8/V0"]
    assert not broken["ok"] and broken["resources"] == {}
    assert "static assertion failed" in broken["error"] and "ROWS > 4" in broken["error"]
    assert "tunebase-prescreen" not in broken["error"]  # the server's temporary paths are not shown
    assert items["R1/V0"]["ok"] and items["R1/V0"]["resources"]["vgpr_spills"] == 0
    capped = items["R4/V24"]["resources"]
    assert capped["vgpr"] <= 24 and capped["vgpr_spills"] > 0 and capped["scratch_bytes"] > 0
    assert capped["workgroup_size"] == 64  # the manifest's launch block ("wave") evaluated for gfx906
    stored = api.http.get(f"/v1/kernels/q8-rows/{pushed['version']}").json()["analyses"]
    assert {(a["variant"], a["ok"]) for a in stored} == {("R1/V0", True), ("R8/V0", False), ("R4/V24", True)}


def _sweep(api: Api, arch: str, variants: list[str], skip: bool = True) -> Any:
    spec = {"arch": arch, "phase": "decode", "kernel": "q8-rows", "formats": ["Q8_0"],
            "shapes": [{"name": "T", "n": 256, "k": 256}], "m": [1, 2], "variants": variants,
            "skip_spilling": skip}  # fmt: skip
    return api.http.post("/v1/sweeps", json=spec)


def _spec_warnings(body: dict[str, Any]) -> list[str]:
    """The spec's own warnings; no gfx906/gfx950 worker runs here, so each status also says that."""
    waiting = [w for w in body["warnings"] if w.startswith("no live worker serves")]
    assert waiting and f"serves {body['arch']} (0 online)" in waiting[0], body["warnings"]
    return [w for w in body["warnings"] if w not in waiting]


def _task_variants(url: str, sweep_id: int) -> list[list[str]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [
                list(v) for v in connection.scalars(select(Task.variants).where(Task.sweep_id == sweep_id))
            ]
    finally:
        engine.dispose()


@SQLITE_ONLY
def test_skip_spilling_leaves_out_variants_whose_analysis_spills(api: Api) -> None:
    version = api.http.post("/v1/kernels", content=package_archive(), headers=GZIP).json()["version"]
    unanalysed = _sweep(api, "gfx906", ["R1/V0", "R2/V24"])
    assert unanalysed.status_code == 202, unanalysed.text
    assert "no stored ISA pre-screen" in _spec_warnings(unanalysed.json())[0]
    assert _task_variants(api.url, unanalysed.json()["id"]) == [["R1/V0", "R2/V24"]] * 2

    body = {"arch": "gfx906", "variants": ["R1/V0", "R2/V24"]}
    analysed = api.http.post(f"/v1/kernels/q8-rows/{version}/analyze", json=body).json()
    assert [i["resources"]["vgpr_spills"] > 0 for i in analysed["items"]] == [False, True]

    skipping = _sweep(api, "gfx906", ["R1/V0", "R2/V24"])
    assert skipping.status_code == 202, skipping.text
    assert _spec_warnings(skipping.json()) == [
        "skip_spilling: 1 of 2 variants left out for Q8_0 (they spill on gfx906): R2/V24"
    ]
    assert _task_variants(api.url, skipping.json()["id"]) == [["R1/V0"]] * 2
    status = api.http.get(f"/v1/sweeps/{skipping.json()['id']}").json()
    assert status["warnings"] == skipping.json()["warnings"]

    kept = _sweep(api, "gfx906", ["R1/V0", "R2/V24"], skip=False)
    assert (
        _spec_warnings(kept.json()) == []
        and _task_variants(api.url, kept.json()["id"]) == [["R1/V0", "R2/V24"]] * 2
    )
    other_arch = _sweep(api, "gfx950", ["R1/V0", "R2/V24"])  # analysed for gfx906 only
    assert "no stored ISA pre-screen" in _spec_warnings(other_arch.json())[0]

    nothing_left = _sweep(api, "gfx906", ["R2/V24"])
    assert nothing_left.status_code == 422
    assert nothing_left.json()["error"]["fields"][0]["field"] == "formats.0"


@SQLITE_ONLY
def test_bad_analyze_requests(api: Api) -> None:
    version = builtin_packages()["tb-decode"].version[:12]
    path = f"/v1/kernels/tb-decode/{version}/analyze"
    cases = [
        ({"arch": "host"}, "arch"),
        ({"arch": "sm_90"}, "arch"),
        ({"arch": "gfx950", "variants": ["MX1/KB3/RW1/U4/RG1/PG0/PP0"]}, "variants.0"),
        ({"arch": "gfx950", "formats": ["Q8_0", "Q2_K"]}, "formats.1"),
        ({"arch": "gfx950", "colour": "blue"}, "colour"),
    ]
    for body, field in cases:
        response = api.http.post(path, json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"]["fields"][0]["field"] == field, (body, response.json())
    assert api.http.post("/v1/kernels/no-such/abc/analyze", json={"arch": "gfx950"}).status_code == 404
    assert (
        api.http.post(f"/v1/kernels/tb-decode/{'f' * 12}/analyze", json={"arch": "gfx950"}).status_code == 404
    )
    reader = {"Authorization": f"Bearer {api.read_token}"}
    assert api.http.post(path, json={"arch": "gfx950"}, headers=reader).status_code == 403
    assert stored_counts(api.url) == (0, 0)


INSTANTIATED = """
#include "tb_portability.h"
#define ROWS_VARIANT(R)                                                                        \\
    extern "C" __global__ TB_LAUNCH_BOUNDS(64, 1) void rows_r##R(float *y) {                   \\
        static_assert(R <= 4, "R > 4 does not fit");                                           \\
        y[TB_TID] = (float)R;                                                                  \\
    }
ROWS_VARIANTS
"""


def test_a_shared_unit_that_fails_is_rebuilt_per_variant(tmp_path: Path) -> None:
    """Template instantiation builds every variant in one unit; one bad variant must not hide the rest."""
    manifest = (PACKAGE_DIR / "tunebase-kernel.toml").read_text()
    instantiate = (
        'symbol = "rows_r{ROWS}"\ninstantiate = "ROWS_VARIANT({ROWS})"\nlist_define = "ROWS_VARIANTS"'
    )
    manifest = manifest.replace('symbol = "kernel"', instantiate)
    (tmp_path / "tunebase-kernel.toml").write_text(manifest)
    (tmp_path / "rows.hip").write_text(INSTANTIATED)
    (tmp_path / "rows.c").write_text((PACKAGE_DIR / "rows.c").read_text())
    package = load_folder(tmp_path)
    result = analyse_package(package, "gfx950", ["Q8_0"], ["R2/V0", "R8/V0"])
    items = {i.variant: i for i in result.items}
    assert items["R2/V0"].ok and items["R2/V0"].symbol == "rows_r2" and items["R2/V0"].resources["vgpr"] >= 1
    assert not items["R8/V0"].ok and "R > 4 does not fit" in (items["R8/V0"].error or "")


def test_variants_past_the_time_budget_are_listed_not_stored_as_failures() -> None:
    package = load_folder(PACKAGE_DIR)
    result = analyse_package(package, "gfx950", None, ["R1/V0", "R2/V0"], budget_s=-1.0)
    assert result.items == [] and result.not_reached == [("Q8_0", "R1/V0"), ("Q8_0", "R2/V0")]


@SQLITE_ONLY
def test_liveness_and_hot_loop_are_stored_and_shown_on_the_dashboard(api: Api) -> None:
    version = api.http.post("/v1/kernels", content=package_archive(), headers=GZIP).json()["version"]
    response = api.http.post(f"/v1/kernels/q8-rows/{version[:12]}/analyze", json={"arch": "gfx950"})
    assert response.status_code == 200, response.text
    items = [i for i in response.json()["items"] if i["ok"]]
    assert items
    for item in items:
        live = item["resources"]["liveness"]
        assert live["within_note"] and 0 < live["vgpr"]["high_water"] <= item["resources"]["arch_vgpr"]
    stored = api.http.get(f"/v1/kernels/q8-rows/{version}").json()["analyses"]
    stored_ok = [a["resources"]["liveness"] for a in stored if a["ok"]]
    assert stored_ok == [i["resources"]["liveness"] for i in items]

    listing = api.http.get("/dashboard/kernels")
    assert listing.status_code == 200 and f"/dashboard/kernels/q8-rows/{version}" in listing.text
    page = api.http.get(f"/dashboard/kernels/q8-rows/{version[:12]}", params={"arch": "gfx950"})
    assert page.status_code == 200
    for item in items:
        row = re.search(
            rf'data-variant="{re.escape(item["variant"])}" data-arch="gfx950"[^>]*>.*?'
            r'<td class="num live-vgpr">(\d+)</td>',
            page.text,
            re.S,
        )
        assert row is not None and int(row.group(1)) == item["resources"]["liveness"]["vgpr"]["high_water"]
    assert "arch VGPR high-water" in page.text
    assert api.http.get("/dashboard/kernels/q8-rows/ffffffffffff").status_code == 404
