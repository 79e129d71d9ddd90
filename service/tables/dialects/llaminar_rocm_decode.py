"""Dialect `llaminar-rocm-decode`: drop-in for Llaminar V2's generated decode include.

Names, struct layouts and key packing must match Llaminar exactly; anything
else (comments, ordering of switch cases) is free but kept deterministic so
table diffs stay reviewable.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.tables.codecs import DecodeCodec, PhaseCodec
from service.tables.dialects.llaminar_cpp import LlaminarCppDialect
from service.tables.model import PointKey, TableChoice

_STRUCTS = """\
#pragma once

#include <cstddef>
#include <cstdint>

namespace llaminar2::rocm::generated {

struct ROCmNativeVNNIDecodeDispatchConfig {
    uint8_t kb = 0;
    uint8_t target_waves_per_cu = 0;
};

struct ROCmNativeVNNIDecodeTuningEntry {
    uint64_t key;
    ROCmNativeVNNIDecodeDispatchConfig config;
};

struct ROCmNativeVNNIDecodeAspectRule {
    long long max_work_items;
    ROCmNativeVNNIDecodeDispatchConfig config;
};

inline constexpr uint64_t packROCmNativeVNNIDecodeDispatchKey(int m, int n, int k) {
    return ((static_cast<uint64_t>(m) & 0xFFull) << 56) |
           ((static_cast<uint64_t>(k) & 0xFFFFFFull) << 28) |
           (static_cast<uint64_t>(n) & 0x0FFFFFFFull);
}
"""


class LlaminarRocmDecodeDialect(LlaminarCppDialect):
    """Emits `selectROCmNativeVNNIDecodeGenerated` and its helpers."""

    name: str = "llaminar-rocm-decode"
    phase: str = "decode"
    prefix = "Decode"
    fallback_m = "m"
    structs = _STRUCTS
    n_fields = 2
    exact_open = "case {cb}:"
    exact_split = r"\n    case "
    exact_cb = r"(\d+):"
    key_suffix = "ull"
    exact_tail = ("        break;",)

    def __init__(self) -> None:
        self.codec: PhaseCodec = DecodeCodec()

    def _render_generated(self, by_cb: dict[int, list[TableChoice]]) -> list[str]:
        out = [
            "inline bool selectROCmNativeVNNIDecodeGenerated(",
            "    uint8_t codebook_id, int m, int n, int k,",
            "    ROCmNativeVNNIDecodeDispatchConfig &out) {",
            "    const uint64_t key = packROCmNativeVNNIDecodeDispatchKey(m, n, k);",
        ]
        out.append("    switch (codebook_id) {" if by_cb else "    (void)key;")
        out += self._exact_tables(by_cb)
        if by_cb:
            out += ["    default:", "        break;", "    }"]
        out += [
            "    return selectROCmNativeVNNIDecodeAspectFallback(codebook_id, m, n, k, out);",
            "}",
            "",
        ]
        return out

    def _replay_answer(self, queries: Sequence[PointKey]) -> str:
        return """\
        const bool ok = gen::selectROCmNativeVNNIDecodeGenerated(
            static_cast<uint8_t>(q.cb), q.m, q.n, q.k, cfg);
        if (ok) {
            std::printf("%d %d %d %d %d %d\\n", q.cb, q.m, q.n, q.k,
                        static_cast<int>(cfg.kb), static_cast<int>(cfg.target_waves_per_cu));
        } else {
            std::printf("%d %d %d %d - -\\n", q.cb, q.m, q.n, q.k);
        }"""
