"""Dialect `struct-table` from a package manifest's [table], and `json` for any package (synthetic times).

Every table here went through the generator's own validation (c++ -fsyntax-only, sorted unique keys, compiled
replay); the tests add what that cannot see: an independently written C++ program against the emitted include,
and a tampered include that validation must reject.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kernels.packages.loader import builtin_packages, load_files, load_folder
from kernels.packages.package import KernelPackage
from service.tables.dialects import dialect_problem, get_dialect
from service.tables.dialects.struct_table import TableShapeError, pascal_name
from service.tables.generate import generate_table
from service.tables.model import GeneratedTable
from service.tables.validate import ExpectedAnswer, TableExpectations, validate_table
from tests.tables.conftest import PREFILL_M, synthetic_data

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "rowsplit-gemv"


@pytest.fixture(scope="module")
def rowsplit() -> KernelPackage:
    return load_folder(EXAMPLE)


@pytest.fixture(scope="module")
def rowsplit_table(rowsplit: KernelPackage) -> GeneratedTable:
    choices, times = synthetic_data([v.name for v in rowsplit.space("host")])
    return generate_table(choices, times, "host", ["7"], "struct-table", phase="decode", package=rowsplit)


def _params(package: KernelPackage, variant: str) -> tuple[int, ...]:
    point = next(p for p in package.all_points() if package.variant_name(p) == variant)
    table = package.manifest.table
    assert table is not None
    return tuple(point[f] for f in table.fields)


def test_struct_table_shape_and_checks(rowsplit: KernelPackage, rowsplit_table: GeneratedTable) -> None:
    text = rowsplit_table.text
    checks = rowsplit_table.checks
    assert checks[:3] == (
        "keys sorted and unique",
        "codebook ids known",
        "compiles (c++ -std=c++17 -fsyntax-only)",
    )
    replayed = int(checks[3].removeprefix("replay reproduces ").removesuffix(" answers"))
    assert replayed > len(rowsplit_table.decisions)  # every measured point plus the fallback probes
    assert "namespace tunebase::kernels::rowsplit_gemv {" in text
    assert "struct RowsplitGemvConfig {\n    uint16_t ROWS = 0;\n    uint16_t UNROLL = 0;\n};" in text
    signature = "selectRowsplitGemv(\n    uint8_t codebook_id, int m, int n, int k, RowsplitGemvConfig &out)"
    assert signature in text
    assert f"rowsplit-gemv@{rowsplit.version[:12]}" in text
    # same decode key packing as the Llaminar include
    assert "((static_cast<uint64_t>(m_key) & 0xFFull) << 56)" in text
    assert pascal_name("rowsplit-gemv") == "RowsplitGemv"


def test_independent_program_reads_the_include(
    rowsplit: KernelPackage, rowsplit_table: GeneratedTable, tmp_path: Path
) -> None:
    """A program written here (not the validator's replay) gets the generator's decision at every point."""
    (tmp_path / "rowsplit.inc").write_text(rowsplit_table.text)
    decisions = [d for d in rowsplit_table.decisions if d.variant is not None]
    assert any(d.source == "exact" for d in decisions) and any(d.source == "fallback" for d in decisions)
    queries = "\n".join(f"    {{{d.codebook}, {d.m}, {d.n}, {d.k}}}," for d in decisions)
    (tmp_path / "main.cpp").write_text(
        f"""#include "rowsplit.inc"
#include <cstdio>
int main() {{
    static const int q[][4] = {{
{queries}
    }};
    for (const auto &p : q) {{
        tunebase::kernels::rowsplit_gemv::RowsplitGemvConfig c{{}};
        if (!tunebase::kernels::rowsplit_gemv::selectRowsplitGemv(p[0], p[1], p[2], p[3], c)) return 3;
        std::printf("%d %d\\n", c.ROWS, c.UNROLL);
    }}
}}
"""
    )
    build = subprocess.run(
        ["c++", "-std=c++17", "-Wall", "-Werror", str(tmp_path / "main.cpp"), "-o", str(tmp_path / "main")],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0
    got = [tuple(int(v) for v in line.split()) for line in run.stdout.splitlines()]
    assert got == [_params(rowsplit, str(d.variant)) for d in decisions]


def test_tampered_include_fails_replay(rowsplit: KernelPackage, rowsplit_table: GeneratedTable) -> None:
    entry = rowsplit_table.entries[0]
    right = "{" + ", ".join(map(str, _params(rowsplit, entry.variant))) + "}},"
    wrong = "{" + ", ".join("99" for _ in _params(rowsplit, entry.variant)) + "}},"
    lines = rowsplit_table.text.splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if right in line and f"{entry.n}x{entry.k}" in line)
    lines[index] = lines[index].replace(right, wrong)
    decoded = {(d.codebook, d.m, d.n, d.k): d.variant for d in rowsplit_table.decisions}
    dialect = get_dialect("struct-table", package=rowsplit)
    answers = tuple(
        ExpectedAnswer(*point, config=None if v is None else dialect.parse_variant(v))
        for point, v in decoded.items()
    )
    expectations = TableExpectations(
        answers=answers,
        known_codebooks=frozenset({0, 5, 19}),
        allowed_configs=frozenset(dialect.parse_variant(v.name) for v in rowsplit.space("host")),
        dialect="struct-table",
        phase="decode",
        package=rowsplit,
    )
    assert validate_table(rowsplit_table.text, expectations).ok
    report = validate_table("".join(lines), expectations)
    assert not report.ok
    assert any("(99, 99)" in failure for failure in report.failures), report.failures


def test_prefill_package_struct_table_uses_the_m_policy() -> None:
    """The built-in prefill package through struct-table: M buckets, prefill key packing, 4 fields."""
    package = builtin_packages()["tb-prefill"]
    choices, times = synthetic_data([v.name for v in package.space("rocm")][:8], ms=PREFILL_M)
    table = generate_table(choices, times, "gfx950", ["3"], "struct-table", phase="prefill", package=package)
    assert any("replay reproduces" in c for c in table.checks)
    assert "inline int selectTbPrefillMKey(int m) {" in table.text
    assert "(static_cast<uint64_t>(m_key & 0xFFFFFF) << 40)" in table.text
    assert "namespace tunebase::kernels::tb_prefill {" in table.text
    assert "struct TbPrefillConfig {\n    uint16_t n_tile = 0;" in table.text
    assert "uint16_t split_k = 0;" in table.text


def _without_table(package: KernelPackage) -> KernelPackage:
    manifest = package.files["tunebase-kernel.toml"].decode()
    manifest = manifest[: manifest.index("[table]")] + manifest[manifest.index("[parity]") :]
    return load_files({**package.files, "tunebase-kernel.toml": manifest.encode()}, package.root)


def test_json_for_any_package_and_struct_table_needs_a_table(rowsplit: KernelPackage) -> None:
    bare = _without_table(rowsplit)
    assert bare.manifest.table is None
    with pytest.raises(TableShapeError, match="no \\[table\\] section"):
        get_dialect("struct-table", package=bare)
    assert dialect_problem("struct-table", bare) is not None
    assert "cannot express rowsplit-gemv" in str(dialect_problem("llaminar-rocm-decode", rowsplit))
    assert dialect_problem("json", bare) is None
    choices, times = synthetic_data([v.name for v in bare.space("host")])
    table = generate_table(choices, times, "host", ["1"], "json", phase="decode", package=bare)
    doc = json.loads(table.text)
    assert doc["kernel"] == {"name": "rowsplit-gemv", "version": bare.version}
    assert doc["config_fields"] == ["ROWS", "UNROLL"]  # every parameter when there is no [table]
    exact = next(iter(doc["codebooks"].values()))["exact"][0]
    assert exact["config"] == list(_params(rowsplit, exact["variant"]))


def test_struct_table_rejects_keyword_fields(rowsplit: KernelPackage) -> None:
    text = rowsplit.files["tunebase-kernel.toml"].decode().replace("UNROLL", "int")
    renamed = load_files({**rowsplit.files, "tunebase-kernel.toml": text.encode()}, rowsplit.root)
    with pytest.raises(TableShapeError, match=r"table\.fields\.1: 'int' is a C\+\+ keyword"):
        get_dialect("struct-table", package=renamed)


def test_builtin_decode_table_carries_every_tuned_parameter() -> None:
    """tb-decode's [table] (TbDecodeConfig) holds all seven parameters of its variant names, so a table entry
    reproduces the winning kernel; the Llaminar decode dialect (KB/TW only) cannot, and says so."""
    decode = builtin_packages()["tb-decode"]
    names = [v.name for v in decode.space("cuda")]
    choices, times = synthetic_data(names[:6])
    table = generate_table(choices, times, "sm_90", ["7"], "struct-table", phase="decode", package=decode)
    fields = ("mx", "kb", "rw", "u", "rg", "pg", "pp")
    members = "\n".join(f"    uint16_t {f} = 0;" for f in fields)
    assert f"struct TbDecodeConfig {{\n{members}\n}};" in table.text
    assert "selectTbDecode(" in table.text
    exact = [d for d in table.decisions if d.source == "exact" and d.variant]
    assert exact
    for decision in exact[:3]:  # the entry's initializer lists the variant's seven values in field order
        assert "{" + ", ".join(map(str, _params(decode, str(decision.variant)))) + "}}," in table.text
    with pytest.raises(ValueError, match="KB"):
        get_dialect("llaminar-rocm-decode").codec.parse_variant(names[0])  # type: ignore[attr-defined]
