"""Dialect `llaminar-rocm-decode`: drop-in for Llaminar V2's generated decode include.

Names, struct layouts and key packing must match Llaminar exactly; anything
else (comments, ordering of switch cases) is free but kept deterministic so
table diffs stay reviewable.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from service.tables.codecs import DecodeCodec, PhaseCodec
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
from service.tables.model import HeaderInfo, PointKey, TableChoice

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


class LlaminarRocmDecodeDialect:
    """Emits `selectROCmNativeVNNIDecodeGenerated` and its helpers."""

    name: str = "llaminar-rocm-decode"
    phase: str = "decode"
    compiled: bool = True

    def __init__(self) -> None:
        self.codec: PhaseCodec = DecodeCodec()

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
        out.append(lookup_helpers("Decode"))
        out.extend(render_fallback("Decode", "m", fallback_rules, self._config))
        out.extend(self._render_generated(by_cb))
        out.append("}  // namespace llaminar2::rocm::generated")
        return "\n".join(out) + "\n"

    def _render_generated(self, by_cb: dict[int, list[TableChoice]]) -> list[str]:
        out = [
            "inline bool selectROCmNativeVNNIDecodeGenerated(",
            "    uint8_t codebook_id, int m, int n, int k,",
            "    ROCmNativeVNNIDecodeDispatchConfig &out) {",
            "    const uint64_t key = packROCmNativeVNNIDecodeDispatchKey(m, n, k);",
        ]
        out.append("    switch (codebook_id) {" if by_cb else "    (void)key;")
        for cb in sorted(by_cb):
            rows = sorted(by_cb[cb], key=lambda c: self.codec.pack_key(c.m, c.n, c.k))
            keys = [self.codec.pack_key(c.m, c.n, c.k) for c in rows]
            if len(set(keys)) != len(keys):
                raise ValueError(f"codebook {cb}: duplicate (M, N, K) keys in choices")
            formats = ",".join(formats_of(cb, rows))
            out.append(f"    case {cb}: {{  // {comment(formats)}")
            out.append("        static constexpr ROCmNativeVNNIDecodeTuningEntry kTable[] = {")
            for key, c in zip(keys, rows, strict=True):
                note = (
                    f"CB={cb} ({','.join(c.formats) or formats}) M={c.m} "
                    f"{c.n}x{c.k} {c.variant} {c.shape} {c.median_us:.3f}us"
                )
                out.append(f"            {{0x{key:016X}ull, {self._config(c.variant)}}},  // {comment(note)}")
            out += [
                "        };",
                "        if (findROCmNativeVNNIDecodeDispatchEntry(kTable, key, out)) {",
                "            return true;",
                "        }",
                "        break;",
                "    }",
            ]
        if by_cb:
            out += ["    default:", "        break;", "    }"]
        out += [
            "    return selectROCmNativeVNNIDecodeAspectFallback(codebook_id, m, n, k, out);",
            "}",
            "",
        ]
        return out

    def replay_program(self, header_name: str, queries: Sequence[PointKey]) -> str:
        rows = "\n".join(f"    {{{cb}, {m}, {n}, {k}}}," for cb, m, n, k in queries) or "    {0, 0, 0, 0},"
        count = max(len(queries), 1)
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
        gen::ROCmNativeVNNIDecodeDispatchConfig cfg{{}};
        const bool ok = gen::selectROCmNativeVNNIDecodeGenerated(
            static_cast<uint8_t>(q.cb), q.m, q.n, q.k, cfg);
        if (ok) {{
            std::printf("%d %d %d %d %d %d\\n", q.cb, q.m, q.n, q.k,
                        static_cast<int>(cfg.kb), static_cast<int>(cfg.target_waves_per_cu));
        }} else {{
            std::printf("%d %d %d %d - -\\n", q.cb, q.m, q.n, q.k);
        }}
    }}
    return 0;
}}
"""

    def parse_replay_output(self, stdout: str) -> ReplayAnswers:
        return parse_replay_lines(stdout, 2)

    def replay_text(self, text: str, queries: Sequence[PointKey], workdir: Path) -> ReplayAnswers:
        raise NotImplementedError("C++ dialects replay through a compiled program")

    def emitted_keys(self, text: str) -> dict[int, list[int]]:
        body = function_body(text, "inline bool selectROCmNativeVNNIDecodeGenerated(")
        keys: dict[int, list[int]] = {}
        for block in re.split(r"\n    case ", body)[1:]:
            cb = int(re.match(r"(\d+):", block).group(1))  # type: ignore[union-attr]
            if cb in keys:
                raise ValueError(f"codebook {cb} has two exact tables")
            keys[cb] = [int(h, 16) for h in re.findall(r"\{0x([0-9A-Fa-f]+)ull,", block)]
        return keys

    def emitted_codebooks(self, text: str) -> set[int]:
        return set(self.emitted_keys(text)) | fallback_codebooks(text, "Decode")


def parse_replay_lines(stdout: str, n_fields: int) -> ReplayAnswers:
    """Lines `cb m n k f1..fN` or `cb m n k - ...` back into answers."""
    answers: ReplayAnswers = {}
    for line in stdout.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 4 + n_fields:
            raise ValueError(f"malformed replay line {line!r}")
        cb, m, n, k = (int(p) for p in parts[:4])
        answers[(cb, m, n, k)] = None if parts[4] == "-" else tuple(int(p) for p in parts[4:])
    return answers
