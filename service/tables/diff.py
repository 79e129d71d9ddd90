"""Diff of two stored table versions, entry by entry (DESIGN §7 `GET /v1/tables/{id}/diff`).

Entries are the table's answers at measured points (exact overlay or fallback),
so a reviewer sees which dispatches change and how their regret moves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

EntryKey = tuple[int, int, int, int]


def codebook_formats(codebook: int) -> str:
    """'Q4_1, Q4_K' for codebook 5: diffs are read by format though tables are keyed by codebook."""
    from kernels.formats.registry import formats_for_codebook

    try:
        return ", ".join(f.name for f in formats_for_codebook(codebook)) or f"codebook {codebook}"
    except (KeyError, ValueError):
        return f"codebook {codebook}"


def _key(entry: Mapping[str, Any]) -> EntryKey:
    return (int(entry["codebook"]), int(entry["m"]), int(entry["n"]), int(entry["k"]))


def _brief(entry: Mapping[str, Any]) -> dict[str, Any]:
    fields = ("codebook", "formats", "m", "n", "k", "shape", "variant", "source", "regret")
    return {f: entry.get(f) for f in fields}


def diff_entries(base: Sequence[Mapping[str, Any]], head: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Added, removed and changed entries of `head` relative to `base`, with the regret change."""
    old = {_key(e): e for e in base}
    new = {_key(e): e for e in head}
    changed = []
    for key in sorted(old.keys() & new.keys()):
        a, b = old[key], new[key]
        if (a.get("variant"), a.get("source")) == (b.get("variant"), b.get("source")):
            continue
        ra, rb = a.get("regret"), b.get("regret")
        changed.append(
            {
                "codebook": key[0],
                "m": key[1],
                "n": key[2],
                "k": key[3],
                "shape": b.get("shape"),
                "formats": b.get("formats"),
                "before": {"variant": a.get("variant"), "source": a.get("source"), "regret": ra},
                "after": {"variant": b.get("variant"), "source": b.get("source"), "regret": rb},
                "regret_change": None if ra is None or rb is None else rb - ra,
            }
        )
    return {
        "added": [_brief(new[k]) for k in sorted(new.keys() - old.keys())],
        "removed": [_brief(old[k]) for k in sorted(old.keys() - new.keys())],
        "changed": changed,
    }


METRIC_KEYS = ("coverage", "exact_hit_rate", "mean_regret", "p95_regret")


def diff_versions(old: Any, head: Any) -> dict[str, Any]:
    """The diff of two stored versions as the API, the CLI and the dashboard all show it."""
    diff = diff_entries(old.entries or [], head.entries or [])
    before, after = old.metrics or {}, head.metrics or {}
    return {
        "id": head.id,
        "base": old.id,
        "same_content": old.sha256 == head.sha256,
        "metrics": {k: {"before": before.get(k), "after": after.get(k)} for k in METRIC_KEYS},
        "counts": {k: len(v) for k, v in diff.items()},
        **diff,
    }
