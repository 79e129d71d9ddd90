"""Dialect `llaminar-rocm-prefill`: drop-in for Llaminar V2's generated prefill include.

Same names as Llaminar's trainer output: `ROCmNativeVNNIPrefillDispatchConfig
{n_tile, m_tile, min_blocks, unroll}`, `packROCmNativeVNNIPrefillDispatchKey(m_key, n, k)`,
`selectROCmNativeVNNIPrefillDispatchMKey(m)` (the M-bucket policy) and
`template <uint8_t CB> selectROCmNativeVNNIPrefillGenerated(m, n, k, out)`;
an aspect + work-size fallback answers shapes without an exact entry.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from service.tables.codecs import PREFILL_M_BUCKETS, PhaseCodec, PrefillCodec
from service.tables.dialects.base import ReplayAnswers, RuleMap
from service.tables.dialects.cpp_common import (
    comment,
    fallback_codebooks,
    formats_of,
    function_body,
    header_comment,
    lookup_helpers,
    render_fallback,
)
from service.tables.dialects.llaminar_rocm_decode import parse_replay_lines
from service.tables.model import HeaderInfo, PointKey, TableChoice

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


def _m_policy() -> str:
    rows = [
        "        " + ", ".join(str(v) for v in PREFILL_M_BUCKETS[i : i + 12]) + ","
        for i in range(0, len(PREFILL_M_BUCKETS), 12)
    ]
    return "\n".join(
        [
            "// M policy: at run time M rounds up to the next bucket; beyond the last, M is its own key.",
            "inline int selectROCmNativeVNNIPrefillDispatchMKey(int m) {",
            "    static constexpr int kMPolicy[] = {",
            *rows,
            "    };",
            "    for (int key : kMPolicy) {",
            "        if (m <= key) {",
            "            return key;",
            "        }",
            "    }",
            "    return m;",
            "}",
            "",
        ]
    )


class LlaminarRocmPrefillDialect:
    """Emits `selectROCmNativeVNNIPrefillGenerated<CB>` and its helpers."""

    name: str = "llaminar-rocm-prefill"
    phase: str = "prefill"
    compiled: bool = True

    def __init__(self) -> None:
        self.codec: PhaseCodec = PrefillCodec()

    def parse_variant(self, variant: str) -> tuple[int, ...]:
        return self.codec.parse_variant(variant)

    def _config(self, variant: str) -> str:
        return "{" + ", ".join(str(v) for v in self.parse_variant(variant)) + "}"

    def render(self, choices: Sequence[TableChoice], fallback_rules: RuleMap, header_info: HeaderInfo) -> str:
        by_cb: dict[int, list[TableChoice]] = defaultdict(list)
        for c in choices:
            by_cb[c.codebook].append(c)
        out: list[str] = []
        out.extend(header_comment(header_info, by_cb))
        out.append(_STRUCTS)
        out.append(_m_policy())
        out.append(lookup_helpers("Prefill"))
        out.extend(render_fallback("Prefill", "m_key", fallback_rules, self._config))
        out.extend(self._render_generated(by_cb))
        out.append("}  // namespace llaminar2::rocm::generated")
        return "\n".join(out) + "\n"

    def _render_generated(self, by_cb: dict[int, list[TableChoice]]) -> list[str]:
        out = [
            "template <uint8_t CB>",
            "inline bool selectROCmNativeVNNIPrefillGenerated(",
            "    int m, int n, int k, ROCmNativeVNNIPrefillDispatchConfig &out) {",
            "    const int m_key = selectROCmNativeVNNIPrefillDispatchMKey(m);",
            "    const uint64_t key = packROCmNativeVNNIPrefillDispatchKey(m_key, n, k);",
            "    (void)key;",
        ]
        for cb in sorted(by_cb):
            rows = sorted(by_cb[cb], key=lambda c: self.codec.pack_key(c.m, c.n, c.k))
            keys = [self.codec.pack_key(c.m, c.n, c.k) for c in rows]
            if len(set(keys)) != len(keys):
                raise ValueError(f"codebook {cb}: duplicate (M, N, K) keys in choices")
            formats = ",".join(formats_of(cb, rows))
            out.append(f"    if constexpr (CB == {cb}) {{  // {comment(formats)}")
            out.append("        static constexpr ROCmNativeVNNIPrefillTuningEntry kTable[] = {")
            for key, c in zip(keys, rows, strict=True):
                note = (
                    f"CB={cb} ({','.join(c.formats) or formats}) M={c.m} "
                    f"{c.n}x{c.k} {c.variant} {c.shape} {c.median_us:.3f}us"
                )
                out.append(f"            {{0x{key:016X}ULL, {self._config(c.variant)}}},  // {comment(note)}")
            out += [
                "        };",
                "        if (findROCmNativeVNNIPrefillDispatchEntry(kTable, key, out)) {",
                "            return true;",
                "        }",
                "    }",
            ]
        out += [
            "    return selectROCmNativeVNNIPrefillAspectFallback(CB, m_key, n, k, out);",
            "}",
            "",
        ]
        return out

    def replay_program(self, header_name: str, queries: Sequence[PointKey]) -> str:
        rows = "\n".join(f"    {{{cb}, {m}, {n}, {k}}}," for cb, m, n, k in queries) or "    {0, 0, 0, 0},"
        count = max(len(queries), 1)
        cases = "\n".join(
            f"        case {cb}: ok = gen::selectROCmNativeVNNIPrefillGenerated<{cb}>(q.m, q.n, q.k, cfg);"
            " break;"
            for cb in sorted({q[0] for q in queries})
        )
        return f"""\
#include "{header_name}"

#include <cstdio>

namespace gen = llaminar2::rocm::generated;

struct Query {{
    int cb;
    int m;
    int n;
    int k;
}};

static const Query kQueries[] = {{
{rows}
}};

int main() {{
    const int count = {len(queries)};
    static_assert(sizeof(kQueries) / sizeof(kQueries[0]) == {count}, "query count");
    for (int i = 0; i < count; ++i) {{
        const Query &q = kQueries[i];
        gen::ROCmNativeVNNIPrefillDispatchConfig cfg{{}};
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
        }}
    }}
    return 0;
}}
"""

    def parse_replay_output(self, stdout: str) -> ReplayAnswers:
        return parse_replay_lines(stdout, 4)

    def replay_text(self, text: str, queries: Sequence[PointKey], workdir: Path) -> ReplayAnswers:
        raise NotImplementedError("C++ dialects replay through a compiled program")

    def emitted_keys(self, text: str) -> dict[int, list[int]]:
        body = function_body(text, "inline bool selectROCmNativeVNNIPrefillGenerated(")
        keys: dict[int, list[int]] = {}
        for block in re.split(r"\n    if constexpr \(CB == ", body)[1:]:
            cb = int(re.match(r"(\d+)\)", block).group(1))  # type: ignore[union-attr]
            if cb in keys:
                raise ValueError(f"codebook {cb} has two exact tables")
            keys[cb] = [int(h, 16) for h in re.findall(r"\{0x([0-9A-Fa-f]+)ULL,", block)]
        return keys

    def emitted_codebooks(self, text: str) -> set[int]:
        return set(self.emitted_keys(text)) | fallback_codebooks(text, "Prefill")
