"""The emitted header is drop-in for Llaminar: names, compile, replay, key order."""

from __future__ import annotations

import random
import re
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from service.tables import (
    GeneratedTable,
    PointTimes,
    TableChoice,
    TableValidationError,
    generate_decode_table,
)
from service.tables.dialects import DIALECTS, get_dialect
from service.tables.dialects.base import ReplayAnswers
from service.tables.lookup import pack_decode_key
from service.tables.validate import ExpectedAnswer, TableExpectations, validate_table

Data = tuple[list[TableChoice], list[PointTimes]]
Replay = Callable[..., ReplayAnswers]  # the conftest `replay` fixture

LLAMINAR_NAMES = [
    "#pragma once",
    "#include <cstddef>",
    "#include <cstdint>",
    "namespace llaminar2::rocm::generated {",
    "struct ROCmNativeVNNIDecodeDispatchConfig {",
    "uint8_t kb = 0;",
    "uint8_t target_waves_per_cu = 0;",
    "struct ROCmNativeVNNIDecodeTuningEntry {",
    "uint64_t key;",
    "struct ROCmNativeVNNIDecodeAspectRule {",
    "long long max_work_items;",
    "inline constexpr uint64_t packROCmNativeVNNIDecodeDispatchKey(int m, int n, int k)",
    "template <size_t Count>",
    "inline bool findROCmNativeVNNIDecodeDispatchEntry(",
    "const ROCmNativeVNNIDecodeTuningEntry (&table)[Count], uint64_t key,",
    "inline ROCmNativeVNNIDecodeDispatchConfig pickROCmNativeVNNIDecodeAspectRule(",
    "const ROCmNativeVNNIDecodeAspectRule (&rules)[Count], long long work_items)",
    "inline bool selectROCmNativeVNNIDecodeAspectFallback(",
    "inline bool selectROCmNativeVNNIDecodeGenerated(",
    "uint8_t codebook_id, int m, int n, int k,",
    "static constexpr ROCmNativeVNNIDecodeTuningEntry kTable[] = {",
    "findROCmNativeVNNIDecodeDispatchEntry(kTable, key, out)",
]


@pytest.fixture(scope="module")
def generated(data: Data) -> GeneratedTable:
    choices, times = data
    return generate_decode_table(choices, times, "gfx906", ["sweep-b", "sweep-a"])


@pytest.fixture(scope="module")
def table(generated: GeneratedTable) -> str:
    return generated.text


def expected_answers(generated: GeneratedTable) -> tuple[ExpectedAnswer, ...]:
    dialect = get_dialect(generated.dialect, generated.phase)
    return tuple(
        ExpectedAnswer(d.codebook, d.m, d.n, d.k, config=dialect.parse_variant(d.variant or ""))
        for d in generated.decisions
    )


def test_registry_has_decode_dialect() -> None:
    assert DIALECTS["llaminar-rocm-decode"].phase == "decode"
    with pytest.raises(KeyError, match="unknown table dialect"):
        get_dialect("nope")


def test_emitted_text_has_llaminar_names(table: str) -> None:
    for name in LLAMINAR_NAMES:
        assert name in table, name
    assert table.index("#pragma once") < table.index("namespace llaminar2")
    assert table.startswith("//")


def test_header_comment_records_provenance_and_metrics(table: str) -> None:
    head = table[: table.index("#pragma once")]
    for needle in (
        "tunebase.tables 0.2.0",
        "dialect: llaminar-rocm-decode",
        "arch: gfx906",
        "phase: decode",
        "sweeps: sweep-a, sweep-b",
        "coverage: 100.00%",
        "exact-hit rate (answer = measured winner): ",
        "exact-entry rate (answered by an overlay entry): ",
        "mean regret: ",
        "p95 regret: ",
        "fallback held-out (grouped CV) mean regret: ",
        "overlays where fallback regret > 2.00%",
        "fallback rules:",
    ):
        assert needle in head, needle
    assert re.search(r"exact entries: (\d+)", head).group(1) == str(len(generated_entries(table)))  # type: ignore[union-attr]


def generated_entries(table: str) -> list[str]:
    return [x for x in table.splitlines() if x.strip().startswith("{0x")]


def test_entry_comments_name_everything(table: str) -> None:
    rows = generated_entries(table)
    assert rows
    for line in rows:
        assert re.search(r"// CB=\d+ \(.+\) M=\d \d+x\d+ KB\d+/TW\d+ \w+ \d+\.\d{3}us$", line), line
    assert "codebook 5 (Q4_1,Q4_K)" in table


@pytest.mark.parametrize("std", ["c++17", "c++20"])
def test_header_compiles_warning_free(table: str, cxx: str, tmp_path: Path, std: str) -> None:
    (tmp_path / "table.inc").write_text(table)
    unit = tmp_path / "unit.cpp"
    unit.write_text('#include "table.inc"\n#include "table.inc"\n')  # pragma once guards it
    argv = [cxx, f"-std={std}", "-fsyntax-only", "-Wall", "-Wextra", "-Wpedantic", "-Werror"]
    subprocess.run([*argv, "-I", str(tmp_path), str(unit)], check=True, timeout=120)


def test_replay_answers_every_point_within_threshold(
    data: Data, generated: GeneratedTable, replay: Replay
) -> None:
    choices, times = data
    dialect = get_dialect("llaminar-rocm-decode")
    answers = replay(generated.text, [c.point for c in choices])
    by_point = {t.point: t.times_us for t in times}
    assert {c.m for c in choices} == {1, 2, 3, 4}
    for d in generated.decisions:
        config = answers[(d.codebook, d.m, d.n, d.k)]
        assert config is not None and d.variant is not None
        assert config == dialect.parse_variant(d.variant)  # C++ agrees with the model
        t = by_point[(d.codebook, d.m, d.n, d.k)]
        assert t[d.variant] / min(t.values()) - 1 <= 0.02 + 1e-12  # overlays bound the regret
    assert any(d.source == "exact" for d in generated.decisions)
    assert any(d.source == "fallback" for d in generated.decisions)


def test_validate_table_replays_answers(generated: GeneratedTable) -> None:
    answers = expected_answers(generated)
    expectations = TableExpectations(
        answers=answers,
        known_codebooks=frozenset({0, 5, 19}),
        allowed_configs=frozenset(a.config for a in answers if a.config is not None),
    )
    report = validate_table(generated.text, expectations)
    assert report.ok, report.failures
    assert report.replayed == len(answers)
    assert not report.warnings


def test_keys_sorted_even_when_input_unsorted(data: Data, table: str) -> None:
    choices, times = data
    shuffled = list(choices)
    random.Random(7).shuffle(shuffled)
    text = generate_decode_table(shuffled, times, "gfx906", ["sweep-a", "sweep-b"]).text
    assert text == table  # deterministic regardless of input order
    keys = get_dialect("llaminar-rocm-decode").emitted_keys(text)
    assert keys
    for cb, ks in keys.items():
        assert ks == sorted(ks) and len(set(ks)) == len(ks) >= 2, cb
    emitted = {int(h, 16) for h in re.findall(r"\{0x([0-9A-F]{16})ull,", text)}
    overlays = generate_decode_table(shuffled, times, "gfx906", ["s"]).entries
    assert emitted == {pack_decode_key(c.m, c.n, c.k) for c in overlays}


def test_pack_key_layout() -> None:
    assert pack_decode_key(2, 1024, 5120) == (2 << 56) | (5120 << 28) | 1024
    assert pack_decode_key(1, 248320, 5120) == 0x010001400003CA00


def test_unknown_codebook_rejected(data: Data) -> None:
    choices, _ = data
    bad = replace(choices[0], codebook=3)
    with pytest.raises(TableValidationError, match="unknown codebook id 3"):
        generate_decode_table([*choices, bad], [], "gfx906", ["s"])
    new = replace(choices[0], codebook=40, formats=("MXFP4",))
    ok = generate_decode_table([new], [], "gfx950", ["s"], known_codebooks=frozenset({40}))
    assert 40 in get_dialect("llaminar-rocm-decode").emitted_codebooks(ok.text)
    assert ok.metrics.coverage == 1.0


def test_validator_rejects_unknown_id_in_text(table: str) -> None:
    report = validate_table(
        table,
        TableExpectations(answers=(), known_codebooks=frozenset({0, 19}), allowed_configs=frozenset()),
    )
    assert not report.ok
    assert any("emitted codebook id 5 is not known" in f for f in report.failures)


def test_validator_catches_tampered_tables(generated: GeneratedTable, table: str) -> None:
    answers = expected_answers(generated)
    expectations = TableExpectations(
        answers=answers,
        known_codebooks=frozenset({0, 5, 19}),
        allowed_configs=frozenset(a.config for a in answers if a.config is not None),
    )
    lines = table.splitlines()
    rows = [i for i, x in enumerate(lines) if x.strip().startswith("{0x")]
    swapped = list(lines)
    swapped[rows[0]], swapped[rows[1]] = swapped[rows[1]], swapped[rows[0]]
    report = validate_table("\n".join(swapped) + "\n", expectations)
    assert any("unsorted" in f for f in report.failures)

    first = generated.entries[0]
    wrong = "{1, 4}" if first.variant != "KB1/TW4" else "{2, 4}"
    key = f"0x{pack_decode_key(first.m, first.n, first.k):016X}ull"
    row = next(x for x in lines if key in x)
    edited = table.replace(row, re.sub(r"\{\d+, \d+\}", wrong, row, count=1))
    report = validate_table(edited, expectations)
    assert any("replay answered" in f for f in report.failures)

    report = validate_table(
        table.replace("struct ROCmNativeVNNIDecodeTuningEntry {", "struct {"), expectations
    )
    assert any("does not compile" in f for f in report.failures)


def test_bad_choices_rejected(data: Data) -> None:
    choices, _ = data
    with pytest.raises(TableValidationError, match="duplicate choice"):
        generate_decode_table([choices[0], choices[0]], [], "gfx906", ["s"])
    with pytest.raises(TableValidationError, match="alias"):
        generate_decode_table([replace(choices[0], k=1 << 24)], [], "gfx906", ["s"])
    with pytest.raises(TableValidationError, match="KB"):
        generate_decode_table([replace(choices[0], variant="N128/MT32")], [], "gfx906", ["s"])


def test_winner_must_be_parity_passing(data: Data) -> None:
    choices, times = data
    c = choices[0]
    pt = next(t for t in times if t.point == c.point)
    others = {v: t for v, t in pt.times_us.items() if v != c.variant}
    with pytest.raises(TableValidationError, match="parity-passing"):
        generate_decode_table([c], [replace(pt, times_us=others)], "gfx906", ["s"])
