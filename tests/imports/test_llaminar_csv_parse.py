"""Parsing Llaminar trainer CSVs: both schemas, trainer spellings, every bad row named by line."""

from __future__ import annotations

import pytest

from service.imports.llaminar_csv import CsvImportError, canonical_variant, parse_csv, parse_files
from tests.imports.test_llaminar_data import decode_csv, prefill_csv


def test_prefill_and_decode_schemas_parse() -> None:
    rows, skipped, problems = parse_csv("p.csv", prefill_csv(), "gfx906")
    assert not problems and not skipped
    assert {r.phase for r in rows} == {"prefill"} and {r.arch for r in rows} == {"gfx906"}
    assert {r.m for r in rows} == {64, 600}
    assert rows[0].source == "p.csv:2" and rows[0].codebook == 5
    rows, _, problems = parse_csv("d.csv", decode_csv(), "gfx906")
    assert not problems and {r.variant for r in rows} == {"KB1/TW4", "KB2/TW8", "KB4/TW8", "KB8/TW8"}


def test_trainer_spellings_are_canonicalised() -> None:
    assert canonical_variant("prefill", "N64_M32_MB1_UG2") == "N64/MT32/MB1/U2"
    assert canonical_variant("prefill", "n128/mt16/mb1") == "N128/MT16/MB1/U4"  # unroll defaults to 4
    assert canonical_variant("prefill", "AUTO") is None
    with pytest.raises(ValueError, match="not a prefill variant"):
        canonical_variant("prefill", "KB8/TW8")


def test_arch_from_backend_column_or_parameter() -> None:
    text = prefill_csv(("Q8_0",), (64,)).replace("rocm,prefill", "gfx942,prefill")
    rows, _, problems = parse_csv("p.csv", text)
    assert not problems and {r.arch for r in rows} == {"gfx942"}
    _, _, problems = parse_csv("p.csv", prefill_csv(("Q8_0",), (64,)))
    assert problems and "names no arch" in problems[0]


def test_bad_rows_reported_with_line_numbers_and_nothing_returned() -> None:
    lines = prefill_csv(("Q8_0",), (64,)).splitlines()
    lines[3] = lines[3].replace(",Q8_0,19,", ",Q8_0,5,")  # codebook mismatch on line 4
    lines[6] = lines[6].replace("N64/MT32/MB1/U4", "N64/XX")  # bad variant on line 7
    lines[7] = lines[7].replace(",0.9999,1,", ",0.9999,maybe,")  # bad flag on line 8
    auto = lines[2].replace("N128/MT32/MB1/U2", "AUTO")
    text = "\n".join([*lines, auto]) + "\n"
    with pytest.raises(CsvImportError) as info:
        parse_files([("good.csv", prefill_csv(("Q4_0",), (64,))), ("bad.csv", text)], "gfx906")
    problems = info.value.problems
    assert len(problems) == 3
    assert problems[0].startswith("bad.csv:4: codebook 5 does not match Q8_0")
    assert problems[1].startswith("bad.csv:7: variant 'N64/XX'")
    assert problems[2].startswith("bad.csv:8: correctness_pass='maybe'")


def test_wrong_header_and_phase() -> None:
    _, _, problems = parse_csv("x.csv", "a,b,c\n1,2,3\n", "gfx906")
    assert problems == [problems[0]] and "x.csv:1: header is neither" in problems[0]
    text = prefill_csv(("Q8_0",), (64,)).replace("rocm,prefill,", "rocm,decode,", 1)
    _, _, problems = parse_csv("p.csv", text, "gfx906")
    assert problems == ["p.csv:2: phase='decode' in a prefill CSV"]


def test_unreadable_bytes_and_odd_names_become_problems() -> None:
    text = prefill_csv(("Q8_0",), (64,)).replace("Qwen36_FFN_GateUp", "Qwen\x00Gate", 1)
    _, _, problems = parse_csv("we\udafdird\tname.csv", text, "gfx906")
    assert problems == [
        "we\\udafdird\\x09name.csv:2: shape='Qwen\\x00Gate' must be printable text of at most 120 characters"
    ]
    problems[0].encode("utf-8")  # safe to put in a JSON response
