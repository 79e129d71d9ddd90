"""C++ text shared by the C++ dialects: comments, header block, lookup helpers, fallback.

Every C++ include uses the same shapes (`{stem}DispatchConfig`, `{stem}TuningEntry`, `{stem}AspectRule`;
the Llaminar ones with stem `ROCmNativeVNNI{Decode,Prefill}`, struct-table with the package's name),
so the pieces are rendered from one place with the dialect's name stem.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence

from service.tables.codecs import PREFILL_M_BUCKETS
from service.tables.fallback import ASPECT_CLASSES
from service.tables.model import CODEBOOK_FORMATS, FallbackRule, HeaderInfo, TableChoice
from service.tables.policy import Fallback
from service.tables.tree import FEATURES, NO_ANSWER, FallbackTree, KModFeature, RoundsFeature, TreeNode

_SAFE_COMMENT_RE = re.compile(r"[^A-Za-z0-9_.,:;=+<>()%/ \-]")
ASPECT_IDENT: dict[str, str] = {
    "very_wide": "kVeryWide",
    "wide": "kWide",
    "balanced": "kBalanced",
    "tall": "kTall",
}


def comment(text: str) -> str:
    """Make text safe inside a // comment (no newlines, no trailing backslash)."""
    return _SAFE_COMMENT_RE.sub("_", text)


def formats_of(codebook: int, choices: Sequence[TableChoice]) -> tuple[str, ...]:
    found: list[str] = []
    for c in choices:
        for f in c.formats:
            if f not in found:
                found.append(f)
    return tuple(found) or tuple(CODEBOOK_FORMATS.get(codebook, ()))


def fmt_metric(value: float | None, missing: str = "no per-variant times") -> str:
    """A percentage, or n/a with the reason it could not be computed."""
    return f"n/a ({missing})" if value is None else f"{value * 100:.2f}%"


def header_comment(info: HeaderInfo, by_cb: dict[int, list[TableChoice]]) -> list[str]:
    m = info.metrics
    sweeps = ", ".join(info.sweep_ids) if info.sweep_ids else "(none)"
    threshold = "n/a" if m.overlay_threshold is None else f"{m.overlay_threshold * 100:.2f}%"
    lines = [
        "Generated file - do not edit by hand.",
        f"generator: {info.generator} {info.version}",
        f"dialect: {info.dialect}",
        f"arch: {info.arch}",
        f"phase: {info.phase}",
        f"sweeps: {sweeps}",
        f"measured points: {m.points} (with per-variant times: {m.regret_points})",
        f"coverage: {fmt_metric(m.coverage)}",
        f"exact-hit rate (answer = measured winner): {fmt_metric(m.exact_hit_rate)}",
        f"exact-entry rate (answered by an overlay entry): {fmt_metric(m.exact_entry_rate)}",
        f"mean regret: {fmt_metric(m.mean_regret)}",
        f"p95 regret: {fmt_metric(m.p95_regret)}",
        f"max regret: {fmt_metric(m.max_regret)}",
        "fallback held-out (grouped CV) mean regret: "
        + fmt_metric(m.segments_cv_regret, "no fallback group has 2 shapes to hold one out"),
        f"exact entries: {m.entries} (overlays where fallback regret > {threshold})",
        f"fallback rules: {m.fallback_rules} (segments, plus tree leaves)",
        "fallback policy per codebook (chosen by held-out regret; tree = decision tree over log2 M, N, K; "
        "surrogate = such a tree learnt from a per-variant time model over a synthetic log-spaced grid, "
        "which may also split on a KB/TW launch's rounds; neighbours = such a tree learnt from every "
        "variant's regret interpolated between the measured shapes):",
        *(f"  {line}" for line in info.fallback_policies),
    ]
    for cb in sorted(by_cb):
        lines.append(f"  codebook {cb} ({','.join(formats_of(cb, by_cb[cb]))}): {len(by_cb[cb])} entries")
    lines.append("regret = time(chosen variant) / time(best variant) - 1")
    return ["// " + comment(line) for line in lines] + [""]


def m_bucket_policy(function: str, per_line: int | None = None) -> list[str]:
    """`int {function}(int m)`: the prefill M policy (PrefillCodec.m_key) in C++, written once so that every
    prefill dialect ships the same rule; ``per_line`` wraps the bucket list (Llaminar's layout)."""
    buckets = [str(v) for v in PREFILL_M_BUCKETS]
    if per_line is None:
        array = [f"    static constexpr int kMPolicy[] = {{{', '.join(buckets)}}};"]
    else:
        rows = [", ".join(buckets[i : i + per_line]) for i in range(0, len(buckets), per_line)]
        array = ["    static constexpr int kMPolicy[] = {", *(f"        {row}," for row in rows), "    };"]
    return [
        "// M policy: at run time M rounds up to the next bucket; beyond the last, M is its own key.",
        f"inline int {function}(int m) {{",
        *array,
        "    for (int key : kMPolicy) {",
        "        if (m <= key) {",
        "            return key;",
        "        }",
        "    }",
        "    return m;",
        "}",
        "",
    ]


def lookup_helpers(p: str) -> str:
    """Binary search over a sorted exact table and the work-size rule pick (names stem ``p``)."""
    return f"""\
template <size_t Count>
inline bool find{p}DispatchEntry(
    const {p}TuningEntry (&table)[Count], uint64_t key,
    {p}DispatchConfig &out) {{
    size_t lo = 0;
    size_t hi = Count;
    while (lo < hi) {{
        const size_t mid = lo + (hi - lo) / 2;
        const uint64_t probe = table[mid].key;
        if (probe == key) {{
            out = table[mid].config;
            return true;
        }}
        if (probe < key) {{
            lo = mid + 1;
        }} else {{
            hi = mid;
        }}
    }}
    return false;
}}

template <size_t Count>
inline {p}DispatchConfig pick{p}AspectRule(
    const {p}AspectRule (&rules)[Count], long long work_items) {{
    for (size_t i = 0; i < Count; ++i) {{
        if (rules[i].max_work_items >= work_items) {{
            return rules[i].config;
        }}
    }}
    return rules[Count - 1].config;
}}
"""


def rounds_helper(p: str) -> list[str]:
    """`{p}KbTwRounds(n, kb, tw, cus, rows, resident)`: service.tables.tree.RoundsFeature in C++ integers."""
    return [
        "// Launch rounds of a KB/TW decode grid at n (the package's [derived] geometry): what a tree",
        "// split on rounds_kb*_tw* reads. rows per wave = max(1, ceil(n / max(1, tw * cus / kb))),",
        "// blocks = ceil(n / (rows_per_wave * rows)) * kb, rounds = ceil(blocks / (cus * resident)).",
        f"inline int {p}KbTwRounds(int n, int kb, int tw, int cus, int rows, int resident) {{",
        "    const long long per = tw * cus / kb > 1 ? tw * cus / kb : 1;",
        "    const long long rows_per_wave = n > per ? (n + per - 1) / per : 1;",
        "    const long long block_rows = rows_per_wave * rows;",
        "    const long long blocks = (n + block_rows - 1) / block_rows * kb;",
        "    const long long slots = static_cast<long long>(cus) * resident;",
        "    return static_cast<int>((blocks + slots - 1) / slots);",
        "}",
        "",
    ]


def feature_expr(feature: str, m_name: str, p: str) -> str:
    """C++ expression of a tree feature (M key, n, k, a KModFeature, or a RoundsFeature call)."""
    if feature in FEATURES:
        return m_name if feature == "m" else feature
    kmod = KModFeature.parse(feature)
    if kmod is not None:
        return f"(k <= {kmod.upto} ? k % {kmod.q} : {kmod.q})"
    rounds = RoundsFeature.parse(feature)
    if rounds is None:
        raise ValueError(f"no C++ for tree feature {feature!r}")
    r = rounds
    return f"{p}KbTwRounds(n, {r.kb}, {r.tw}, {r.cus}, {r.rows}, {r.resident})"


def render_tree(
    node: TreeNode, m_name: str, config: Callable[[str], str], indent: str, p: str = ""
) -> list[str]:
    """Nested ifs over integer thresholds (each the log2 midpoint between neighbouring values)."""
    if node.variant == NO_ANSWER:
        return [f"{indent}return false;  // no variant of the table is valid here"]
    if node.variant is not None:
        note = f"{node.variant} ({node.points} pts)"
        return [f"{indent}out = {config(node.variant)};  // {comment(note)}", f"{indent}return true;"]
    assert node.left is not None and node.right is not None
    name = feature_expr(node.feature, m_name, p)
    return [
        f"{indent}if ({name} <= {node.threshold}) {{",
        *render_tree(node.left, m_name, config, indent + "    ", p),
        f"{indent}}}",
        *render_tree(node.right, m_name, config, indent, p),
    ]


def _tree_case(cb: int, tree: FallbackTree, m_name: str, config: Callable[[str], str], p: str) -> list[str]:
    ms = " || ".join(f"{m_name} == {m}" for m in tree.ms)
    extra = tree.root.features() - set(FEATURES)
    over = "M, N, K" + (" and launch rounds" if any(RoundsFeature.parse(f) for f in extra) else "")
    over += " and K's divisibility" if any(KModFeature.parse(f) for f in extra) else ""
    head = f"decision tree over {over}: depth {tree.root.depth()}, {tree.root.leaves()} leaves"
    return [
        f"    case {cb}: {{  // {comment(head)}",
        f"        if (!({ms})) {{",
        "            return false;",
        "        }",
        *render_tree(tree.root, m_name, config, "        ", p),
        "    }",
    ]


def render_fallback(p: str, m_name: str, fallback: Fallback, config: Callable[[str], str]) -> list[str]:
    """`select{p}AspectFallback(codebook_id, m, n, k, out)`: switch on codebook; a codebook's decision tree,
    or its segments: switch on M, aspect class, rules by work."""
    nested: dict[int, dict[int, dict[str, list[FallbackRule]]]] = defaultdict(lambda: defaultdict(dict))
    for (cb, m, aspect), rules in fallback.rules.items():
        if rules and cb not in fallback.trees:
            nested[cb][m][aspect] = list(rules)
    trees = dict(fallback.trees)
    geometric = any(RoundsFeature.parse(f) for t in trees.values() for f in t.root.features() - set(FEATURES))
    out = [
        *(rounds_helper(p) if geometric else []),
        f"inline bool select{p}AspectFallback(",
        f"    uint8_t codebook_id, int {m_name}, int n, int k,",
        f"    {p}DispatchConfig &out) {{",
        "    if (n <= 0 || k <= 0) {",
        "        return false;",
        "    }",
        "    const long long work_items = static_cast<long long>(n) * static_cast<long long>(k);",
        "    // aspect classes of N/K: very_wide >= 16, wide >= 2, balanced >= 0.75, tall",
        "    const int aspect_class = n >= 16LL * k ? 0 : n >= 2LL * k ? 1 : 4LL * n >= 3LL * k ? 2 : 3;",
    ]
    if trees and not nested:  # trees read only M, N, K
        out += ["    (void)work_items;", "    (void)aspect_class;"]
    if nested or trees:
        out.append("    switch (codebook_id) {")
    else:
        out += [f"    (void){v};" for v in ("codebook_id", m_name, "work_items", "aspect_class", "out")]
    for cb in sorted(set(nested) | set(trees)):
        if cb in trees:
            out += _tree_case(cb, trees[cb], m_name, config, p)
            continue
        out += [f"    case {cb}: {{", f"        switch ({m_name}) {{"]
        for m in sorted(nested[cb]):
            out.append(f"        case {m}: {{")
            for aspect in ASPECT_CLASSES:
                group = nested[cb][m].get(aspect)
                if not group:
                    continue
                ident = ASPECT_IDENT[aspect]
                out.append(f"            if (aspect_class == {ASPECT_CLASSES.index(aspect)}) {{  // {aspect}")
                out.append(f"                static constexpr {p}AspectRule {ident}[] = {{")
                for i, r in enumerate(group):
                    if len(group) == 1:
                        bound = "any work"
                    elif i == len(group) - 1:
                        bound = f"work > {group[i - 1].max_work_items}"
                    else:
                        bound = f"work <= {r.max_work_items}"
                    worst = "" if r.worst_regret is None else f", worst regret {r.worst_regret:.4f}"
                    out.append(
                        f"                    {{{r.max_work_items}LL, {config(r.variant)}}},"
                        f"  // {comment(f'{bound}: {r.variant} ({r.points} pts{worst})')}"
                    )
                out += [
                    "                };",
                    f"                out = pick{p}AspectRule({ident}, work_items);",
                    "                return true;",
                    "            }",
                ]
            out += ["            return false;", "        }"]
        out += ["        default:", "            return false;", "        }", "    }"]
    if nested or trees:
        out += ["    default:", "        return false;", "    }"]
    else:
        out.append("    return false;")
    out += ["}", ""]
    return out


def function_body(text: str, signature: str) -> str:
    start = text.find(signature)
    if start < 0:
        raise ValueError(f"{signature!r} not found in table text")
    end = text.find("\n}\n", start)
    return text[start : end if end >= 0 else len(text)]


def fallback_codebooks(text: str, p: str) -> set[int]:
    body = function_body(text, f"inline bool select{p}AspectFallback(")
    return {int(cb) for cb in re.findall(r"\n    case (\d+):", body)}
