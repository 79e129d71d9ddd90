"""One-line readings of the liveness and hot-loop records, shared by `tunebase isa` and the dashboard.

Plain functions over the stored JSON (they accept what an older record lacks), so a page that shows a
stored analysis needs nothing but the record.
"""

from __future__ import annotations

from typing import Any

PURPOSES = (
    "accumulators", "fragments", "scales", "staging", "addresses", "loop_control", "output", "other",
)  # fmt: skip
PURPOSE_WORDS = {
    "accumulators": "accumulators",
    "fragments": "A/B fragments",
    "scales": "scales",
    "staging": "LDS staging",
    "addresses": "addresses",
    "loop_control": "loop control",
    "output": "output",
    "other": "other",
}


def purposes_text(counts: dict[str, int] | None) -> str:
    """'64 accumulators, 64 A/B fragments, 14 scales' (purposes in a fixed order, zeros left out)."""
    counts = counts or {}
    return ", ".join(f"{counts[p]} {PURPOSE_WORDS[p]}" for p in PURPOSES if counts.get(p))


def _peak_text(label: str, peak: dict[str, Any] | None, limit: int | None) -> str | None:
    if not peak or not peak.get("high_water"):
        return None
    bound = f"/{limit}" if limit else ""
    where = f" at {peak['at']}"
    region = peak.get("region") or {}
    if region.get("instructions", 1) > 1:
        where = f" over {region['start']}-{region['end']} ({region['instructions']} instructions)"
    if peak.get("loop"):
        where += f" in loop {peak['loop']}"
    parts = purposes_text(peak.get("breakdown"))
    return f"{label} high-water {peak['high_water']}{bound}{where}" + (f": {parts}" if parts else "")


def liveness_lines(liveness: dict[str, Any] | None) -> list[str]:
    """Where register pressure peaks and what holds the registers there."""
    if not liveness:
        return []
    lines: list[str] = []
    vgpr = _peak_text("arch VGPR", liveness.get("vgpr"), liveness.get("arch_vgpr_limit"))
    agpr = _peak_text("AGPR", liveness.get("agpr"), liveness.get("agpr_limit"))
    lines.extend(line for line in (vgpr, agpr) if line)
    loop = liveness.get("hot_loop")
    if loop and loop.get("vgpr", {}).get("high_water"):
        head = loop.get("live_at_head") or {}
        carried = purposes_text(head.get("breakdown"))
        lines.append(
            f"hot loop {loop['start']}-{loop['end']}: arch VGPR high-water {loop['vgpr']['high_water']}, "
            f"{head.get('vgpr', 0)} live across iterations" + (f" ({carried})" if carried else "")
        )
    if liveness.get("within_note") is False:
        lines.append("liveness exceeds the note's register counts: the disassembly was misread")
    return lines


def hot_loop_lines(loop: dict[str, Any] | None) -> list[str]:
    """Waits, MFMA density, LDS addressing and padding of the hottest loop."""
    if not loop:
        return []
    waits = loop.get("waitcnt") or {}
    mfma = loop.get("mfma") or {}
    lines = [
        f"hot loop waits: {waits.get('count', 0)} s_waitcnt, {waits.get('drain_vmcnt', 0)} drain vmcnt, "
        f"{waits.get('drain_lgkmcnt', 0)} drain lgkmcnt, {waits.get('combined', 0)} combined "
        f"vmcnt+lgkmcnt ({waits.get('full_drain', 0)} both 0)"
    ]
    if mfma.get("per_iteration"):
        kinds = ", ".join(f"{n} {k}" for k, n in (mfma.get("kinds") or {}).items())
        lines.append(
            f"hot loop MFMA: {mfma['per_iteration']} per iteration, {100 * mfma.get('density', 0):.0f}% of "
            f"{loop.get('instructions', 0)} instructions ({kinds})"
        )
    mix = loop.get("mix") or {}
    lines.append("hot loop mix: " + ", ".join(f"{n} {k}" for k, n in mix.items() if n))
    for kind in ("ds_read", "ds_write"):
        lds = loop.get(kind) or {}
        if lds.get("count"):
            lines.append(
                f"hot loop {kind}: {lds['with_offset']}/{lds['count']} with the offset in the immediate, "
                f"{lds['base_vgprs']} address VGPRs"
            )
    padding = loop.get("padding") or {}
    extra = []
    if loop.get("address_valu"):
        extra.append(f"{loop['address_valu']} VALU computing only addresses")
    if padding.get("s_nop"):
        extra.append(f"{padding['s_nop']} s_nop ({padding.get('s_nop_wait_states', 0)} wait states)")
    loads = loop.get("loads_by_purpose") or {}
    for kind, counts in loads.items():
        extra.append(f"{kind}: " + ", ".join(f"{n} {PURPOSE_WORDS.get(p, p)}" for p, n in counts.items()))
    if extra:
        lines.append("hot loop " + "; ".join(extra))
    return lines
