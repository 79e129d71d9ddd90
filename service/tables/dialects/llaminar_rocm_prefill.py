"""Dialect `llaminar-rocm-prefill`: drop-in for Llaminar V2's generated prefill include.

Same names as Llaminar's trainer output: `ROCmNativeVNNIPrefillDispatchConfig
{n_tile, m_tile, min_blocks, unroll}`, `packROCmNativeVNNIPrefillDispatchKey(m_key, n, k)`,
`selectROCmNativeVNNIPrefillDispatchMKey(m)` (the M-bucket policy) and
`template <uint8_t CB> selectROCmNativeVNNIPrefillGenerated(m, n, k, out)`;
an aspect + work-size fallback answers shapes without an exact entry.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.tables.codecs import PhaseCodec, PrefillCodec
from service.tables.dialects.cpp_common import m_bucket_policy
from service.tables.dialects.llaminar_cpp import LlaminarCppDialect
from service.tables.model import PointKey, TableChoice

_STRUCTS = """\
#pragma once

#include <cstddef>
#include <cstdint>

namespace llaminar2::rocm::generated {

struct ROCmNativeVNNIPrefillDispatchConfig {
    uint8_t n_tile = 0;
    uint8_t m_tile = 0;
    uint8_t min_blocks = 0;
    uint8_t unroll = 0;
};

struct ROCmNativeVNNIPrefillTuningEntry {
    uint64_t key;
    ROCmNativeVNNIPrefillDispatchConfig config;
};

struct ROCmNativeVNNIPrefillAspectRule {
    long long max_work_items;
    ROCmNativeVNNIPrefillDispatchConfig config;
};

inline constexpr uint64_t packROCmNativeVNNIPrefillDispatchKey(int m_key, int n, int k) {
    return (static_cast<uint64_t>(m_key & 0xFFFFFF) << 40) |
           (static_cast<uint64_t>(k & 0xFFFFF) << 20) |
           static_cast<uint64_t>(n & 0xFFFFF);
}
"""


class LlaminarRocmPrefillDialect(LlaminarCppDialect):
    """Emits `selectROCmNativeVNNIPrefillGenerated<CB>` and its helpers."""

    name: str = "llaminar-rocm-prefill"
    phase: str = "prefill"
    prefix = "Prefill"
    fallback_m = "m_key"
    structs = _STRUCTS
    n_fields = 4
    exact_open = "if constexpr (CB == {cb})"
    exact_split = r"\n    if constexpr \(CB == "
    exact_cb = r"(\d+)\)"
    key_suffix = "ULL"

    def __init__(self) -> None:
        self.codec: PhaseCodec = PrefillCodec()

    def _preamble(self) -> list[str]:
        return m_bucket_policy("selectROCmNativeVNNIPrefillDispatchMKey", per_line=12)

    def _render_generated(self, by_cb: dict[int, list[TableChoice]]) -> list[str]:
        out = [
            "template <uint8_t CB>",
            "inline bool selectROCmNativeVNNIPrefillGenerated(",
            "    int m, int n, int k, ROCmNativeVNNIPrefillDispatchConfig &out) {",
            "    const int m_key = selectROCmNativeVNNIPrefillDispatchMKey(m);",
            "    const uint64_t key = packROCmNativeVNNIPrefillDispatchKey(m_key, n, k);",
            "    (void)key;",
        ]
        out += self._exact_tables(by_cb)
        out += [
            "    return selectROCmNativeVNNIPrefillAspectFallback(CB, m_key, n, k, out);",
            "}",
            "",
        ]
        return out

    def _replay_answer(self, queries: Sequence[PointKey]) -> str:
        cases = "\n".join(
            f"        case {cb}: ok = gen::selectROCmNativeVNNIPrefillGenerated<{cb}>(q.m, q.n, q.k, cfg);"
            " break;"
            for cb in sorted({q[0] for q in queries})
        )
        return f"""\
        bool ok = false;
        switch (q.cb) {{
{cases}
        default: ok = false; break;
        }}
        if (ok) {{
            std::printf("%d %d %d %d %d %d %d %d\\n", q.cb, q.m, q.n, q.k, static_cast<int>(cfg.n_tile),
                        static_cast<int>(cfg.m_tile), static_cast<int>(cfg.min_blocks),
                        static_cast<int>(cfg.unroll));
        }} else {{
            std::printf("%d %d %d %d - - - -\\n", q.cb, q.m, q.n, q.k);
        }}"""
