"""Dialect `llaminar-rocm-decode`: drop-in for Llaminar V2's generated decode include.

Names, struct layouts and key packing must match Llaminar exactly; anything
else (comments, ordering of switch cases) is free but kept deterministic so
table diffs stay reviewable.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from service.tables.dialects.base import ReplayAnswers, RuleMap
from service.tables.fallback import ASPECT_CLASSES
from service.tables.lookup import pack_decode_key
from service.tables.model import (
    CODEBOOK_FORMATS,
    DecodeChoice,
    FallbackRule,
    HeaderInfo,
    PointKey,
)

_VARIANT_RE = re.compile(r"^KB(\d+)/TW(\d+)$")
_SAFE_COMMENT_RE = re.compile(r"[^A-Za-z0-9_.,:;=+<>()%/ \-]")

_ASPECT_IDENT: dict[str, str] = {
    "very_wide": "kVeryWide",
    "wide": "kWide",
    "balanced": "kBalanced",
    "tall": "kTall",
}

_PRELUDE = """\
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

template <size_t Count>
inline bool findROCmNativeVNNIDecodeDispatchEntry(
    const ROCmNativeVNNIDecodeTuningEntry (&table)[Count], uint64_t key,
    ROCmNativeVNNIDecodeDispatchConfig &out) {
    size_t lo = 0;
    size_t hi = Count;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const uint64_t probe = table[mid].key;
        if (probe == key) {
            out = table[mid].config;
            return true;
        }
        if (probe < key) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return false;
}

template <size_t Count>
inline ROCmNativeVNNIDecodeDispatchConfig pickROCmNativeVNNIDecodeAspectRule(
    const ROCmNativeVNNIDecodeAspectRule (&rules)[Count], long long work_items) {
    for (size_t i = 0; i < Count; ++i) {
        if (rules[i].max_work_items >= work_items) {
            return rules[i].config;
        }
    }
    return rules[Count - 1].config;
}
"""


def _comment(text: str) -> str:
    """Make text safe inside a // comment (no newlines, no trailing backslash)."""
    return _SAFE_COMMENT_RE.sub("_", text)


def _formats_of(codebook: int, choices: Sequence[DecodeChoice]) -> tuple[str, ...]:
    found: list[str] = []
    for c in choices:
        for f in c.formats:
            if f not in found:
                found.append(f)
    return tuple(found) or tuple(CODEBOOK_FORMATS.get(codebook, ()))


def _fmt_metric(value: float | None, pct: bool = True) -> str:
    if value is None:
        return "n/a (no per-variant times)"
    return f"{value * 100:.2f}%" if pct else f"{value:.4f}"


class LlaminarRocmDecodeDialect:
    """Emits `selectROCmNativeVNNIDecodeGenerated` and its helpers."""

    name: str = "llaminar-rocm-decode"
    phase: str = "decode"

    def parse_variant(self, variant: str) -> tuple[int, ...]:
        match = _VARIANT_RE.match(variant)
        if match is None:
            raise ValueError(f"decode variant {variant!r} is not of the form KB{{kb}}/TW{{tw}}")
        kb, tw = int(match.group(1)), int(match.group(2))
        if not (0 <= kb <= 0xFF and 0 <= tw <= 0xFF):
            raise ValueError(f"decode variant {variant!r} does not fit uint8_t fields")
        return (kb, tw)

    def _config(self, variant: str) -> str:
        kb, tw = self.parse_variant(variant)
        return f"{{{kb}, {tw}}}"

    def render(
        self,
        choices: Sequence[DecodeChoice],
        fallback_rules: RuleMap,
        header_info: HeaderInfo,
    ) -> str:
        by_cb: dict[int, list[DecodeChoice]] = defaultdict(list)
        for c in choices:
            by_cb[c.codebook].append(c)
        out: list[str] = []
        out.extend(self._header_comment(header_info, by_cb))
        out.append(_PRELUDE)
        out.extend(self._render_fallback(fallback_rules))
        out.extend(self._render_generated(by_cb))
        out.append("}  // namespace llaminar2::rocm::generated")
        return "\n".join(out) + "\n"

    def _header_comment(self, info: HeaderInfo, by_cb: dict[int, list[DecodeChoice]]) -> list[str]:
        m = info.metrics
        sweeps = ", ".join(info.sweep_ids) if info.sweep_ids else "(none)"
        lines = [
            "Generated file - do not edit by hand.",
            f"generator: {info.generator} {info.version}",
            f"dialect: {info.dialect}",
            f"arch: {info.arch}",
            "phase: decode",
            f"sweeps: {sweeps}",
            f"measured points: {m.points} (with per-variant times: {m.regret_points})",
            f"coverage: {_fmt_metric(m.coverage)}",
            f"exact-hit rate: {_fmt_metric(m.exact_hit_rate)}",
            f"mean regret: {_fmt_metric(m.mean_regret)}",
            f"p95 regret: {_fmt_metric(m.p95_regret)}",
            f"exact entries: {m.entries}",
            f"fallback rules: {m.fallback_rules}",
        ]
        for cb in sorted(by_cb):
            formats = ",".join(_formats_of(cb, by_cb[cb]))
            lines.append(f"  codebook {cb} ({formats}): {len(by_cb[cb])} entries")
        lines.append("regret = time(chosen variant) / time(best variant) - 1")
        return ["// " + _comment(line) for line in lines] + [""]

    def _render_fallback(self, fallback_rules: RuleMap) -> list[str]:
        nested: dict[int, dict[int, dict[str, list[FallbackRule]]]] = defaultdict(lambda: defaultdict(dict))
        for (cb, m, aspect), rules in fallback_rules.items():
            if rules:
                nested[cb][m][aspect] = list(rules)
        out = [
            "inline bool selectROCmNativeVNNIDecodeAspectFallback(",
            "    uint8_t codebook_id, int m, int n, int k,",
            "    ROCmNativeVNNIDecodeDispatchConfig &out) {",
            "    if (n <= 0 || k <= 0) {",
            "        return false;",
            "    }",
            "    const long long work_items = static_cast<long long>(n) * static_cast<long long>(k);",
            "    // aspect classes of N/K: very_wide >= 16, wide >= 2, balanced >= 0.75, tall",
            "    const int aspect_class = n >= 16LL * k ? 0 : n >= 2LL * k ? 1 : 4LL * n >= 3LL * k ? 2 : 3;",
        ]
        if nested:
            out.append("    switch (codebook_id) {")
        else:
            out += [
                "    (void)codebook_id;",
                "    (void)m;",
                "    (void)work_items;",
                "    (void)aspect_class;",
                "    (void)out;",
            ]
        for cb in sorted(nested):
            out.append(f"    case {cb}: {{")
            out.append("        switch (m) {")
            for m in sorted(nested[cb]):
                out.append(f"        case {m}: {{")
                for aspect in ASPECT_CLASSES:
                    group = nested[cb][m].get(aspect)
                    if not group:
                        continue
                    ident = _ASPECT_IDENT[aspect]
                    out.append(
                        f"            if (aspect_class == {ASPECT_CLASSES.index(aspect)}) {{  // {aspect}"
                    )
                    out.append(
                        f"                static constexpr ROCmNativeVNNIDecodeAspectRule {ident}[] = {{"
                    )
                    for i, r in enumerate(group):
                        if len(group) == 1:
                            bound = "any work"
                        elif i == len(group) - 1:
                            bound = f"work > {group[i - 1].max_work_items}"
                        else:
                            bound = f"work <= {r.max_work_items}"
                        worst = "" if r.worst_regret is None else f", worst regret {r.worst_regret:.4f}"
                        out.append(
                            f"                    {{{r.max_work_items}LL, {self._config(r.variant)}}},"
                            f"  // {_comment(f'{bound}: {r.variant} ({r.points} pts{worst})')}"
                        )
                    out.append("                };")
                    out.append(
                        f"                out = pickROCmNativeVNNIDecodeAspectRule({ident}, work_items);"
                    )
                    out.append("                return true;")
                    out.append("            }")
                out.append("            return false;")
                out.append("        }")
            out.append("        default:")
            out.append("            return false;")
            out.append("        }")
            out.append("    }")
        if nested:
            out += ["    default:", "        return false;", "    }"]
        else:
            out.append("    return false;")
        out += ["}", ""]
        return out

    def _render_generated(self, by_cb: dict[int, list[DecodeChoice]]) -> list[str]:
        out = [
            "inline bool selectROCmNativeVNNIDecodeGenerated(",
            "    uint8_t codebook_id, int m, int n, int k,",
            "    ROCmNativeVNNIDecodeDispatchConfig &out) {",
            "    const uint64_t key = packROCmNativeVNNIDecodeDispatchKey(m, n, k);",
        ]
        if by_cb:
            out.append("    switch (codebook_id) {")
        else:
            out.append("    (void)key;")
        for cb in sorted(by_cb):
            rows = sorted(by_cb[cb], key=lambda c: pack_decode_key(c.m, c.n, c.k))
            keys = [pack_decode_key(c.m, c.n, c.k) for c in rows]
            if len(set(keys)) != len(keys):
                raise ValueError(f"codebook {cb}: duplicate (M, N, K) keys in choices")
            formats = ",".join(_formats_of(cb, rows))
            out.append(f"    case {cb}: {{  // {_comment(formats)}")
            out.append("        static constexpr ROCmNativeVNNIDecodeTuningEntry kTable[] = {")
            for key, c in zip(keys, rows, strict=True):
                note = (
                    f"CB={cb} ({','.join(c.formats) or formats}) M={c.m} "
                    f"{c.n}x{c.k} {c.variant} {c.shape} {c.median_us:.3f}us"
                )
                out.append(
                    f"            {{0x{key:016X}ull, {self._config(c.variant)}}},  // {_comment(note)}"
                )
            out.append("        };")
            out.append("        if (findROCmNativeVNNIDecodeDispatchEntry(kTable, key, out)) {")
            out.append("            return true;")
            out.append("        }")
            out.append("        break;")
            out.append("    }")
        if by_cb:
            out += ["    default:", "        break;", "    }"]
        out += [
            "    return selectROCmNativeVNNIDecodeAspectFallback(codebook_id, m, n, k, out);",
            "}",
            "",
        ]
        return out

    def replay_program(self, header_name: str, queries: Sequence[PointKey]) -> str:
        rows = "\n".join(f"    {{{cb}, {m}, {n}, {k}}}," for cb, m, n, k in queries)
        if not rows:
            rows = "    {0, 0, 0, 0},"
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
        answers: ReplayAnswers = {}
        for line in stdout.splitlines():
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise ValueError(f"malformed replay line {line!r}")
            cb, m, n, k = (int(p) for p in parts[:4])
            answers[(cb, m, n, k)] = None if parts[4] == "-" else (int(parts[4]), int(parts[5]))
        return answers

    def _function_body(self, text: str, name: str) -> str:
        start = text.find(f"inline bool {name}(")
        if start < 0:
            raise ValueError(f"{name} not found in table text")
        end = text.find("\n}\n", start)
        return text[start : end if end >= 0 else len(text)]

    def emitted_keys(self, text: str) -> dict[int, list[int]]:
        body = self._function_body(text, "selectROCmNativeVNNIDecodeGenerated")
        keys: dict[int, list[int]] = {}
        for block in re.split(r"\n    case ", body)[1:]:
            cb = int(re.match(r"(\d+):", block).group(1))  # type: ignore[union-attr]
            if cb in keys:
                raise ValueError(f"codebook {cb} has two exact tables")
            keys[cb] = [int(h, 16) for h in re.findall(r"\{0x([0-9A-Fa-f]+)ull,", block)]
        return keys

    def emitted_codebooks(self, text: str) -> set[int]:
        found: set[int] = set(self.emitted_keys(text))
        body = self._function_body(text, "selectROCmNativeVNNIDecodeAspectFallback")
        found.update(int(cb) for cb in re.findall(r"\n    case (\d+):", body))
        return found
