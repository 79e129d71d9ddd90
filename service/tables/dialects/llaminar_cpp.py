"""The shape both Llaminar C++ dialects share: render skeleton, sorted exact tables, replay, parsing.

Decode and prefill includes differ only in names (`ROCmNativeVNNI{prefix}...`),
the struct block, how one codebook's exact table is opened (`case` vs
`if constexpr`) and the generated function's head and tail; a subclass states
those and inherits the rest, so both dialects emit from one piece of code.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from service.tables.codecs import PhaseCodec
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
from service.tables.policy import Fallback, as_fallback


class LlaminarCppDialect:
    """Base of the Llaminar `.inc` dialects; subclasses set the class attributes and two hooks."""

    name: str
    phase: str
    compiled: bool = True
    codec: PhaseCodec
    prefix: str  # "Decode" / "Prefill": names are `ROCmNativeVNNI{prefix}...`
    fallback_m: str  # name of the M argument of the aspect fallback
    structs: str  # `#pragma once`, includes, namespace, structs and key packing
    n_fields: int  # config fields per replay answer
    exact_open: str  # one codebook's exact table opens with `{exact_open.format(cb=...)} {`
    exact_split: str  # regex that splits the generated function into per-codebook blocks
    exact_cb: str  # regex at the start of a block, capturing the codebook id
    key_suffix: str  # "ull" / "ULL" after each hex key
    exact_tail: tuple[str, ...] = ()  # lines after a codebook's lookup, before its closing brace
    namespace: str = "llaminar2::rocm::generated"

    @property
    def names(self) -> str:
        return f"ROCmNativeVNNI{self.prefix}"

    @property
    def entry_name(self) -> str:
        """The generated lookup function (its body holds the exact tables)."""
        return f"select{self.names}Generated"

    def parse_variant(self, variant: str) -> tuple[int, ...]:
        return self.codec.parse_variant(variant)

    def _config(self, variant: str) -> str:
        return "{" + ", ".join(str(v) for v in self.parse_variant(variant)) + "}"

    def render(
        self, choices: Sequence[TableChoice], fallback: Fallback | RuleMap, header_info: HeaderInfo
    ) -> str:
        by_cb: dict[int, list[TableChoice]] = defaultdict(list)
        for c in choices:
            by_cb[c.codebook].append(c)
        out: list[str] = []
        out.extend(header_comment(header_info, by_cb))
        out.append(self.structs)
        out.extend(self._preamble())
        out.append(lookup_helpers(self.names))
        out.extend(render_fallback(self.names, self.fallback_m, as_fallback(fallback), self._config))
        out.extend(self._render_generated(by_cb))
        out.append(f"}}  // namespace {self.namespace}")
        return "\n".join(out) + "\n"

    def _preamble(self) -> list[str]:
        """Extra pieces between the structs and the lookup helpers."""
        return []

    def _render_generated(self, by_cb: dict[int, list[TableChoice]]) -> list[str]:
        """`select{names}Generated`: subclass head and tail around `_exact_tables`."""
        raise NotImplementedError

    def _exact_tables(self, by_cb: dict[int, list[TableChoice]]) -> list[str]:
        """Each codebook's entries sorted by packed key, found by the binary-search helper."""
        out: list[str] = []
        for cb in sorted(by_cb):
            rows = sorted(by_cb[cb], key=lambda c: self.codec.pack_key(c.m, c.n, c.k))
            keys = [self.codec.pack_key(c.m, c.n, c.k) for c in rows]
            if len(set(keys)) != len(keys):
                raise ValueError(f"codebook {cb}: duplicate (M, N, K) keys in choices")
            formats = ",".join(formats_of(cb, rows))
            out.append(f"    {self.exact_open.format(cb=cb)} {{  // {comment(formats)}")
            out.append(f"        static constexpr {self.names}TuningEntry kTable[] = {{")
            for key, c in zip(keys, rows, strict=True):
                note = (
                    f"CB={cb} ({','.join(c.formats) or formats}) M={c.m} "
                    f"{c.n}x{c.k} {c.variant} {c.shape} {c.median_us:.3f}us"
                )
                entry = f"{{0x{key:016X}{self.key_suffix}, {self._config(c.variant)}}}"
                out.append(f"            {entry},  // {comment(note)}")
            out += [
                "        };",
                f"        if (find{self.names}DispatchEntry(kTable, key, out)) {{",
                "            return true;",
                "        }",
                *self.exact_tail,
                "    }",
            ]
        return out

    def _replay_answer(self, queries: Sequence[PointKey]) -> str:
        """Replay loop body after `cfg` is declared: select into `cfg`, print one line."""
        raise NotImplementedError

    def replay_program(self, header_name: str, queries: Sequence[PointKey]) -> str:
        rows = "\n".join(f"    {{{cb}, {m}, {n}, {k}}}," for cb, m, n, k in queries) or "    {0, 0, 0, 0},"
        count = max(len(queries), 1)
        return f"""\
#include "{header_name}"

#include <cstdio>

namespace gen = {self.namespace};

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
        gen::{self.names}DispatchConfig cfg{{}};
{self._replay_answer(queries)}
    }}
    return 0;
}}
"""

    def parse_replay_output(self, stdout: str) -> ReplayAnswers:
        return parse_replay_lines(stdout, self.n_fields)

    def replay_text(self, text: str, queries: Sequence[PointKey], workdir: Path) -> ReplayAnswers:
        raise NotImplementedError("C++ dialects replay through a compiled program")

    def emitted_keys(self, text: str) -> dict[int, list[int]]:
        body = function_body(text, f"inline bool {self.entry_name}(")
        keys: dict[int, list[int]] = {}
        for block in re.split(self.exact_split, body)[1:]:
            cb = int(re.match(self.exact_cb, block).group(1))  # type: ignore[union-attr]
            if cb in keys:
                raise ValueError(f"codebook {cb} has two exact tables")
            keys[cb] = [int(h, 16) for h in re.findall(rf"\{{0x([0-9A-Fa-f]+){self.key_suffix},", block)]
        return keys

    def emitted_codebooks(self, text: str) -> set[int]:
        return set(self.emitted_keys(text)) | fallback_codebooks(text, self.names)


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
