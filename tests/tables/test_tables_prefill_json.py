"""Prefill (Llaminar names, M buckets) and JSON dialects share fitting and validation with decode."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from service.tables import GeneratedTable, PointTimes, TableChoice, TableValidationError, generate_table
from service.tables.codecs import PREFILL_M_BUCKETS, PrefillCodec
from service.tables.dialects import get_dialect
from service.tables.dialects.base import ReplayAnswers

Data = tuple[list[TableChoice], list[PointTimes]]
Replay = Callable[..., ReplayAnswers]

PREFILL_NAMES = [
    "#pragma once",
    "namespace llaminar2::rocm::generated {",
    "struct ROCmNativeVNNIPrefillDispatchConfig {",
    "uint8_t n_tile = 0;",
    "uint8_t m_tile = 0;",
    "uint8_t min_blocks = 0;",
    "uint8_t unroll = 0;",
    "struct ROCmNativeVNNIPrefillTuningEntry {",
    "inline constexpr uint64_t packROCmNativeVNNIPrefillDispatchKey(int m_key, int n, int k)",
    "inline int selectROCmNativeVNNIPrefillDispatchMKey(int m)",
    "inline bool findROCmNativeVNNIPrefillDispatchEntry(",
    "template <uint8_t CB>\ninline bool selectROCmNativeVNNIPrefillGenerated(\n"
    "    int m, int n, int k, ROCmNativeVNNIPrefillDispatchConfig &out)",
    "inline bool selectROCmNativeVNNIPrefillAspectFallback(",
    "const int m_key = selectROCmNativeVNNIPrefillDispatchMKey(m);",
]


@pytest.fixture(scope="module")
def prefill(prefill_data: Data) -> GeneratedTable:
    choices, times = prefill_data
    return generate_table(choices, times, "gfx906", ["7"], "llaminar-rocm-prefill", phase="prefill")


def test_prefill_codec_keys_and_policy() -> None:
    codec = PrefillCodec()
    assert codec.pack_key(600, 17408, 5120) == (600 << 40) | (5120 << 20) | 17408
    assert [codec.m_key(m) for m in (1, 2, 5, 64, 65, 599, 600, 601, 4096, 4097)] == [
        2, 2, 64, 64, 128, 600, 600, 608, 4096, 4097,
    ]  # fmt: skip
    assert codec.parse_variant("N128/MT32/MB1/U2") == (128, 32, 1, 2)
    with pytest.raises(ValueError, match="N\\{n_tile\\}"):
        codec.parse_variant("KB8/TW8")


def test_prefill_header_has_llaminar_names_and_compiles(
    prefill: GeneratedTable, cxx: str, tmp_path: Path
) -> None:
    for name in PREFILL_NAMES:
        assert name in prefill.text, name
    assert "phase: prefill" in prefill.text
    assert ", ".join(str(b) for b in PREFILL_M_BUCKETS[:12]) in prefill.text
    assert any("compiles" in c for c in prefill.checks) and any(
        "replay reproduces" in c for c in prefill.checks
    )
    (tmp_path / "p.inc").write_text(prefill.text)
    (tmp_path / "u.cpp").write_text(
        '#include "p.inc"\n#include "p.inc"\n'
        "bool f(int m, int n, int k) {\n"
        "    llaminar2::rocm::generated::ROCmNativeVNNIPrefillDispatchConfig c{};\n"
        "    return llaminar2::rocm::generated::selectROCmNativeVNNIPrefillGenerated<5>(m, n, k, c);\n}\n"
    )
    argv = [
        cxx,
        "-std=c++17",
        "-fsyntax-only",
        "-Wall",
        "-Wextra",
        "-Wpedantic",
        "-Werror",
        "-I",
        str(tmp_path),
    ]
    subprocess.run([*argv, str(tmp_path / "u.cpp")], check=True, timeout=120)
    for line in prefill.text.splitlines():
        if line.strip().startswith("{0x"):
            assert "// CB=" in line and "us" in line and "M=" in line, line


def test_prefill_replay_rounds_m_up_to_buckets(prefill: GeneratedTable, replay: Replay) -> None:
    dialect = get_dialect("llaminar-rocm-prefill")
    measured = [(d.codebook, d.m, d.n, d.k) for d in prefill.decisions]
    # M=500 rounds up to bucket 512 (not tuned: no fallback for that M), 590 -> 600 (tuned), 63 -> 64.
    rounded = [(cb, {600: 590, 64: 63, 2048: 1537}.get(m, m), n, k) for cb, m, n, k in measured]
    answers = replay(prefill.text, [*measured, *rounded, (5, 500, 17408, 5120)], "llaminar-rocm-prefill")
    for d in prefill.decisions:
        assert d.variant is not None
        assert answers[(d.codebook, d.m, d.n, d.k)] == dialect.parse_variant(d.variant)
    for (cb, m, n, k), (_, rm, _, _) in zip(measured, rounded, strict=True):
        assert answers[(cb, rm, n, k)] == answers[(cb, m, n, k)]
    assert answers[(5, 500, 17408, 5120)] is None


def test_prefill_rejects_off_policy_m(prefill_data: Data) -> None:
    choices, _ = prefill_data
    with pytest.raises(TableValidationError, match="not an M-policy bucket"):
        generate_table(
            [replace(choices[0], m=100)], [], "gfx906", ["s"], "llaminar-rocm-prefill", phase="prefill"
        )
    with pytest.raises(TableValidationError, match="N\\{n_tile\\}"):
        generate_table([replace(choices[0], variant="KB8/TW8")], [], "g", ["s"], "llaminar-rocm-prefill")


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_json_dialect_matches_cpp_table(phase: str, data: Data, prefill_data: Data) -> None:
    choices, times = data if phase == "decode" else prefill_data
    cpp_name = f"llaminar-rocm-{phase}"
    cpp = generate_table(choices, times, "gfx906", ["1"], cpp_name, phase=phase)
    js = generate_table(choices, times, "gfx906", ["1"], "json", phase=phase)
    assert any("replay reproduces" in c for c in js.checks)
    doc = json.loads(js.text)
    assert doc["phase"] == phase and doc["dialect"] == "json"
    assert doc["config_fields"] == list(get_dialect(cpp_name).codec.config_fields)
    assert (doc["m_policy"] is not None) == (phase == "prefill")
    assert js.decisions == cpp.decisions  # same fit and overlays, different text
    assert js.metrics == cpp.metrics
    n_exact = sum(len(t["exact"]) for t in doc["codebooks"].values())
    assert n_exact == cpp.metrics.entries


def test_json_validation_catches_tampering(prefill: GeneratedTable, prefill_data: Data) -> None:
    from service.tables.validate import ExpectedAnswer, TableExpectations, validate_table

    choices, times = prefill_data
    js = generate_table(choices, times, "gfx906", ["1"], "json", phase="prefill")
    dialect = get_dialect("json", "prefill")
    answers = tuple(
        ExpectedAnswer(d.codebook, d.m, d.n, d.k, config=dialect.parse_variant(d.variant or ""))
        for d in js.decisions
    )
    exp = TableExpectations(
        answers, frozenset({0, 5, 19}), frozenset(a.config for a in answers if a.config), "json", "prefill"
    )
    assert validate_table(js.text, exp).ok
    doc = json.loads(js.text)
    cb = next(cb for cb, t in doc["codebooks"].items() if len(t["exact"]) >= 2)
    doc["codebooks"][cb]["exact"].reverse()
    assert any("unsorted" in f for f in validate_table(json.dumps(doc), exp).failures)
    doc["codebooks"][cb]["exact"].reverse()
    doc["codebooks"][cb]["exact"][0]["config"] = [64, 16, 3, 0]
    assert any("replay answered" in f for f in validate_table(json.dumps(doc), exp).failures)
