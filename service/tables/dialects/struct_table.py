"""Dialect `struct-table`: a C++ dispatch include for ANY kernel package, shaped by its manifest's `[table]`.

The struct is the manifest's (`[table] struct`, one member per `[table] fields` parameter, `uint16_t` when
every declared value fits, else `int32_t`); the key packing, M policy, sorted exact tables and aspect +
work-size fallback are the Llaminar dialects' for the package's phase, so an engine that already embeds a
Llaminar include reads this one the same way. Everything lives in `namespace tunebase::kernels::<package>`
and the entry point is named after the package: `select<Package>(codebook_id, m, n, k, out)` for
`rowsplit-gemv` is `selectRowsplitGemv`. M is the run-time M; the include applies the phase's M policy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kernels.packages.package import KernelPackage
from service.tables.codecs import PhaseCodec, get_codec
from service.tables.dialects.cpp_common import m_bucket_policy
from service.tables.dialects.llaminar_cpp import LlaminarCppDialect
from service.tables.model import PointKey, TableChoice

UINT16_MAX = 0xFFFF
INT32_RANGE = (-(2**31), 2**31 - 1)
# C++ keywords a manifest parameter name could collide with (they are otherwise valid C identifiers)
# fmt: off
_CPP_KEYWORDS = frozenset((
    "alignas", "alignof", "and", "asm", "auto", "bool", "break", "case", "catch", "char", "class",
    "const", "constexpr", "continue", "default", "delete", "do", "double", "else", "enum", "explicit",
    "export", "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int", "long",
    "mutable", "namespace", "new", "noexcept", "not", "nullptr", "operator", "or", "private",
    "protected", "public", "register", "return", "short", "signed", "sizeof", "static", "struct",
    "switch", "template", "this", "throw", "true", "try", "typedef", "typeid", "typename", "union",
    "unsigned", "using", "virtual", "void", "volatile", "while", "xor",
))
# fmt: on


class TableShapeError(ValueError):
    """The package's manifest cannot be rendered as a struct table (the message names the manifest key)."""


def pascal_name(package_name: str) -> str:
    """`rowsplit-gemv` -> `RowsplitGemv` (a C++ identifier stem once prefixed by `select`/`pack`)."""
    return "".join(part[:1].upper() + part[1:] for part in package_name.split("-") if part)


def namespace_name(package_name: str) -> str:
    """`rowsplit-gemv` -> `rowsplit_gemv`; a leading digit gets a `k` so it stays an identifier."""
    name = package_name.replace("-", "_")
    return f"k{name}" if name[:1].isdigit() else name


def field_type(values: Sequence[int]) -> str:
    return "uint16_t" if min(values) >= 0 and max(values) <= UINT16_MAX else "int32_t"


class PackageCodec:
    """The phase's M policy and key packing, with the package's variant names and `[table]` fields.

    A package without `[table]` (only the json dialect accepts one) stores every parameter.
    """

    def __init__(self, package: KernelPackage) -> None:
        self._base: PhaseCodec = get_codec(package.phase)
        self.phase = package.phase
        self.package = package
        table = package.manifest.table
        fields = table.fields if table else package.param_names
        self.config_fields: tuple[str, ...] = tuple(fields)
        self.max_m, self.max_n, self.max_k = self._base.max_m, self._base.max_n, self._base.max_k
        self._points = {package.variant_name(p): p for p in package.all_points()}

    def parse_variant(self, variant: str) -> tuple[int, ...]:
        params = self._points.get(variant)
        if params is None:
            raise ValueError(
                f"{variant!r} is not a {self.package.name} variant "
                f"(names: {self.package.manifest.variant.name})"
            )
        return tuple(params[f] for f in self.config_fields)

    def m_key(self, m: int) -> int:
        return self._base.m_key(m)

    def pack_key(self, m_key: int, n: int, k: int) -> int:
        return self._base.pack_key(m_key, n, k)


_PACK = {
    "decode": """\
    return ((static_cast<uint64_t>(m_key) & 0xFFull) << 56) |
           ((static_cast<uint64_t>(k) & 0xFFFFFFull) << 28) |
           (static_cast<uint64_t>(n) & 0x0FFFFFFFull);""",
    "prefill": """\
    return (static_cast<uint64_t>(m_key & 0xFFFFFF) << 40) |
           (static_cast<uint64_t>(k & 0xFFFFF) << 20) |
           static_cast<uint64_t>(n & 0xFFFFF);""",
}


class StructTableDialect(LlaminarCppDialect):
    """Emits `select<Package>` and its helpers for one package (bound at construction)."""

    name: str = "struct-table"
    fallback_m = "m_key"
    exact_open = "case {cb}:"
    exact_split = r"\n    case "
    exact_cb = r"(\d+):"
    key_suffix = "ull"
    exact_tail = ("        break;",)

    def __init__(self, package: KernelPackage) -> None:
        table = package.manifest.table
        if table is None:
            raise TableShapeError(f"kernel package {package.name} has no [table] section (struct and fields)")
        for index, field in enumerate(table.fields):
            if field in _CPP_KEYWORDS:
                raise TableShapeError(f"table.fields.{index}: {field!r} is a C++ keyword")
            values = package.manifest.params[field]
            if min(values) < INT32_RANGE[0] or max(values) > INT32_RANGE[1]:
                raise TableShapeError(f"table.fields.{index}: values of {field} do not fit int32_t")
        self.package = package
        self.phase = package.phase
        self.codec = PackageCodec(package)
        self.struct = table.struct
        self.fields = tuple(table.fields)
        self.n_fields = len(self.fields)
        self.stem = pascal_name(package.name)
        self.namespace = f"tunebase::kernels::{namespace_name(package.name)}"
        self.structs = self._structs()

    @property
    def names(self) -> str:
        return self.stem

    @property
    def entry_name(self) -> str:
        return f"select{self.stem}"

    def _structs(self) -> str:
        params = self.package.manifest.params
        members = "\n".join(f"    {field_type(params[f])} {f} = 0;" for f in self.fields)
        p, s = self.stem, self.struct
        return f"""\
#pragma once

#include <cstddef>
#include <cstdint>

// kernel package: {self.package.name}@{self.package.version[:12]} ({self.phase})
// variant names: {re.sub(r"[^A-Za-z0-9_{{}}/.,: -]", "_", self.package.manifest.variant.name)}
namespace {self.namespace} {{

struct {s} {{
{members}
}};
using {p}DispatchConfig = {s};

struct {p}TuningEntry {{
    uint64_t key;
    {s} config;
}};

struct {p}AspectRule {{
    long long max_work_items;
    {s} config;
}};

inline constexpr uint64_t pack{p}Key(int m_key, int n, int k) {{
{_PACK[self.phase]}
}}
"""

    def _preamble(self) -> list[str]:
        """The M policy: run-time M -> the M the table is keyed by."""
        if self.phase == "decode":
            return [
                f"inline int select{self.stem}MKey(int m) {{ return m; }}  // decode: M is its own key",
                "",
            ]
        return m_bucket_policy(f"select{self.stem}MKey")

    def _render_generated(self, by_cb: dict[int, list[TableChoice]]) -> list[str]:
        p = self.stem
        out = [
            f"inline bool select{p}(",
            f"    uint8_t codebook_id, int m, int n, int k, {self.struct} &out) {{",
            f"    const int m_key = select{p}MKey(m);",
            f"    const uint64_t key = pack{p}Key(m_key, n, k);",
        ]
        out.append("    switch (codebook_id) {" if by_cb else "    (void)key;")
        out += self._exact_tables(by_cb)
        if by_cb:
            out += ["    default:", "        break;", "    }"]
        out += [f"    return select{p}AspectFallback(codebook_id, m_key, n, k, out);", "}", ""]
        return out

    def _replay_answer(self, queries: Sequence[PointKey]) -> str:
        fmt = " ".join(["%d %d %d %d", *["%lld"] * self.n_fields])
        values = ", ".join(f"static_cast<long long>(cfg.{f})" for f in self.fields)
        misses = " ".join(["%d %d %d %d", *["-"] * self.n_fields])
        return f"""\
        const bool ok = gen::select{self.stem}(static_cast<uint8_t>(q.cb), q.m, q.n, q.k, cfg);
        if (ok) {{
            std::printf("{fmt}\\n", q.cb, q.m, q.n, q.k, {values});
        }} else {{
            std::printf("{misses}\\n", q.cb, q.m, q.n, q.k);
        }}"""
