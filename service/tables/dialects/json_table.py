"""Dialect `json`: the same table as data, for engines that load tables at run time.

Phase-agnostic: the phase's codec supplies config fields, the M policy and keys. Bound to an uploaded
package, the config fields are the package's `[table] fields` (every parameter without one).
Validation cannot compile JSON, so the replay reads the emitted document with
an independent evaluator (it does not reuse the generator's lookup model).
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from kernels.packages.package import KernelPackage
from service.tables.codecs import PREFILL_M_BUCKETS, PhaseCodec, first_rejection, get_codec
from service.tables.dialects.base import ReplayAnswers, RuleMap
from service.tables.dialects.struct_table import PackageCodec
from service.tables.model import HeaderInfo, PointKey, TableChoice
from service.tables.policy import Fallback, as_fallback
from service.tables.tree import NO_ANSWER, TreeNode

ASPECTS = ("very_wide", "wide", "balanced", "tall")


def _rounds(feature: str, n: int, k: int) -> int:
    """A rounds_kb*_tw*_cu*_r*_b* (or k_mod_*) feature read from its name alone, as a json consumer
    would (written apart from service.tables.tree so the replay checks the documented formula)."""
    modulus = re.fullmatch(r"k_mod_(\d+)_upto_(\d+)", feature)
    if modulus is not None:
        q, upto = int(modulus.group(1)), int(modulus.group(2))
        return k % q if k <= upto else q
    found = re.fullmatch(r"rounds_kb(\d+)_tw(\d+)_cu(\d+)_r(\d+)_b(\d+)", feature)
    if found is None:
        raise ValueError(f"unknown tree feature {feature!r}")
    kb, tw, cus, rows, resident = (int(g) for g in found.groups())
    per = max(1, tw * cus // kb)
    rows_per_wave = max(1, (n + per - 1) // per)
    blocks = (n + rows_per_wave * rows - 1) // (rows_per_wave * rows) * kb
    return (blocks + cus * resident - 1) // (cus * resident)


class JsonDialect:
    """Emits one JSON document: header, M policy, exact entries and fallback rules per codebook."""

    name: str = "json"
    compiled: bool = False

    def __init__(
        self,
        phase: str = "decode",
        package: KernelPackage | None = None,
        variants: Collection[str] | None = None,
    ) -> None:
        self.phase = phase
        # The phase codec (Llaminar's fields) serves a built-in package's data when the names fit it: its own
        # variants if they still do, or the table's `variants` (imported Llaminar rows keep Llaminar's names).
        # Anything else is described by the package's own parameters.
        fits = package is not None and package.builtin
        if package is not None and fits:
            names = variants if variants is not None else package.all_names()
            fits = first_rejection(get_codec(phase), names) is None
        self.package = None if package is None or fits else package
        self.codec: PhaseCodec = get_codec(phase) if self.package is None else PackageCodec(self.package)

    def parse_variant(self, variant: str) -> tuple[int, ...]:
        return self.codec.parse_variant(variant)

    def _tree(self, node: TreeNode) -> dict[str, Any]:
        if node.variant == NO_ANSWER:  # no variant of the table is valid here: no answer
            return {"variant": None, "config": None, "points": node.points}
        if node.variant is not None:
            config = list(self.parse_variant(node.variant))
            return {"variant": node.variant, "config": config, "points": node.points}
        assert node.left is not None and node.right is not None
        return {
            "feature": node.feature,
            "threshold": node.threshold,
            "le": self._tree(node.left),
            "gt": self._tree(node.right),
        }

    def render(
        self, choices: Sequence[TableChoice], fallback: Fallback | RuleMap, header_info: HeaderInfo
    ) -> str:
        fb = as_fallback(fallback)
        fallback_rules = fb.rules
        codebooks: dict[str, dict[str, Any]] = {}

        def slot(cb: int) -> dict[str, Any]:
            return codebooks.setdefault(str(cb), {"formats": [], "exact": [], "fallback": {}})

        for c in sorted(choices, key=lambda c: (c.codebook, self.codec.pack_key(c.m, c.n, c.k))):
            s = slot(c.codebook)
            s["formats"] = sorted(set(s["formats"]) | set(c.formats))
            s["exact"].append(
                {
                    "key": self.codec.pack_key(c.m, c.n, c.k),
                    "m": c.m,
                    "n": c.n,
                    "k": c.k,
                    "config": list(self.parse_variant(c.variant)),
                    "variant": c.variant,
                    "shape": c.shape,
                    "median_us": round(c.median_us, 6),
                }
            )
        for (cb, m, aspect), rules in sorted(fallback_rules.items()):
            if rules:
                slot(cb)["fallback"].setdefault(str(m), {})[aspect] = [
                    {
                        "max_work_items": r.max_work_items,
                        "config": list(self.parse_variant(r.variant)),
                        "variant": r.variant,
                        "points": r.points,
                        "worst_regret": r.worst_regret,
                    }
                    for r in rules
                ]
        for cb, tree in sorted(fb.trees.items()):
            slot(cb)["tree"] = {"m": list(tree.ms), "root": self._tree(tree.root)}
        info = header_info
        document = {
            "format": "tunebase-dispatch-table",
            "format_version": 1,
            "generator": f"{info.generator} {info.version}",
            "dialect": info.dialect,
            "arch": info.arch,
            "phase": info.phase,
            "sweep_ids": list(info.sweep_ids),
            "metrics": {
                "coverage": info.metrics.coverage,
                "exact_hit_rate": info.metrics.exact_hit_rate,
                "exact_entry_rate": info.metrics.exact_entry_rate,
                "mean_regret": info.metrics.mean_regret,
                "p95_regret": info.metrics.p95_regret,
                "points": info.metrics.points,
                "entries": info.metrics.entries,
                "fallback_rules": info.metrics.fallback_rules,
            },
            "config_fields": list(self.codec.config_fields),
            "m_policy": list(PREFILL_M_BUCKETS) if self.phase == "prefill" else None,
            "aspect_classes": "very_wide N>=16K, wide N>=2K, balanced 4N>=3K, tall",
            "fallback_policies": list(info.fallback_policies),
            "tree": "a codebook with `tree` answers by it (when M is in tree.m): at a node, go to `le` when "
            "the feature (m, n or k) <= threshold, else `gt`; a leaf whose config is null answers nothing "
            "(no variant is valid there); otherwise its `fallback` segments answer. "
            "A feature rounds_kb{kb}_tw{tw}_cu{cus}_r{rows}_b{resident} is the launch rounds of that KB/TW "
            "grid at n, in integers: per = max(1, tw*cus // kb), rows_per_wave = max(1, ceil(n / per)), "
            "blocks = ceil(n / (rows_per_wave*rows)) * kb, rounds = ceil(blocks / (cus*resident)); "
            "a feature k_mod_{q}_upto_{h} is k % q where k <= h, else q",
            "codebooks": codebooks,
        }
        if self.package is not None:
            document["kernel"] = {"name": self.package.name, "version": self.package.version}
        return json.dumps(document, indent=1, sort_keys=True) + "\n"

    def replay_program(self, header_name: str, queries: Sequence[PointKey]) -> str:
        raise NotImplementedError("the json dialect is replayed in-process")

    def parse_replay_output(self, stdout: str) -> ReplayAnswers:
        raise NotImplementedError("the json dialect is replayed in-process")

    def replay_text(self, text: str, queries: Sequence[PointKey], workdir: Path) -> ReplayAnswers:
        doc = json.loads(text)
        policy: list[int] | None = doc.get("m_policy")
        answers: ReplayAnswers = {}
        for cb, m, n, k in queries:
            m_key = m
            if policy:
                i = bisect.bisect_left(policy, m)
                m_key = policy[i] if i < len(policy) else m
            table = doc["codebooks"].get(str(cb))
            answer: tuple[int, ...] | None = None
            if table is not None:
                for e in table["exact"]:
                    if (e["m"], e["n"], e["k"]) == (m_key, n, k):
                        answer = tuple(e["config"])
                        break
                tree = table.get("tree")
                if answer is None and tree is not None:
                    if m_key in tree["m"] and n > 0 and k > 0:
                        node, values = tree["root"], {"m": m_key, "n": n, "k": k}
                        while "config" not in node:
                            value = values.get(node["feature"])
                            if value is None:
                                value = _rounds(node["feature"], n, k)
                            below = value <= node["threshold"]
                            node = node["le"] if below else node["gt"]
                        answer = None if node["config"] is None else tuple(node["config"])
                elif answer is None and n > 0 and k > 0:
                    aspect = ASPECTS[0 if n >= 16 * k else 1 if n >= 2 * k else 2 if 4 * n >= 3 * k else 3]
                    rules = table["fallback"].get(str(m_key), {}).get(aspect)
                    if rules:
                        chosen = next((r for r in rules if r["max_work_items"] >= n * k), rules[-1])
                        answer = tuple(chosen["config"])
            answers[(cb, m, n, k)] = answer
        return answers

    def emitted_keys(self, text: str) -> dict[int, list[int]]:
        doc = json.loads(text)
        return {
            int(cb): [int(e["key"]) for e in t["exact"]] for cb, t in doc["codebooks"].items() if t["exact"]
        }

    def emitted_codebooks(self, text: str) -> set[int]:
        return {int(cb) for cb in json.loads(text)["codebooks"]}
