"""Plain-language findings from resources, occupancy and census: what limits this kernel and what to try."""

from __future__ import annotations

from typing import Any

from workers.isa.occupancy import SIMDS_PER_CU, Occupancy, limits_for


def _launch_bounds_hint(occ: Occupancy, workgroup_size: int, target_waves: int) -> str:
    """``__launch_bounds__(threads, min_blocks)`` asking HIP-Clang for ``target_waves`` per SIMD.

    HIP-Clang turns the second argument into amdgpu-waves-per-eu = min_blocks * waves_per_wg / 4.
    """
    min_blocks = max(1, -(-target_waves * SIMDS_PER_CU // occ.waves_per_workgroup))
    return f"__launch_bounds__({workgroup_size}, {min_blocks})"


def diagnose(
    arch: str,
    vgpr: int,
    agpr: int,
    sgpr: int,
    lds_bytes: int,
    scratch_bytes: int,
    vgpr_spills: int,
    sgpr_spills: int,
    workgroup_size: int,
    occ: Occupancy,
    census: dict[str, Any] | None = None,
) -> list[str]:
    """Lines such as "VGPR 130 → 1 wave/SIMD: cap with __launch_bounds__(256, 2)"."""
    limits = limits_for(arch)
    lines: list[str] = []
    plural = "s" if occ.waves_per_simd != 1 else ""
    if occ.limiter == "vgpr":
        regs = f"VGPR {vgpr}" + (f" + AGPR {agpr}" if agpr else "")
        target = occ.waves_per_simd + 1
        budget = (limits.vgprs_per_simd // target) // limits.vgpr_granule * limits.vgpr_granule
        hint = _launch_bounds_hint(occ, workgroup_size, target)
        lines.append(
            f"{regs} → {occ.waves_per_simd} wave{plural}/SIMD: cap with {hint} "
            f"(≤{budget} registers gives {target} waves/SIMD)"
        )
    elif occ.limiter == "sgpr":
        lines.append(
            f"SGPR {sgpr} → {occ.waves_per_simd} wave{plural}/SIMD: ≤80 SGPRs allows {min(10, occ.max_waves)}"
        )
    elif occ.limiter == "lds":
        lines.append(
            f"LDS {lds_bytes / 1024:.0f} KiB limits workgroups per CU to {occ.workgroups_per_cu} "
            f"(of {limits.lds_per_cu // 1024} KiB) → {occ.waves_per_simd} wave{plural}/SIMD"
        )
    elif occ.limiter == "workgroup":
        lines.append(
            f"workgroup of {workgroup_size} threads ({occ.waves_per_workgroup} wave"
            f"{'s' if occ.waves_per_workgroup != 1 else ''}) hits the per-CU workgroup limit → "
            f"{occ.waves_per_simd} waves/SIMD: use larger workgroups"
        )
    if vgpr_spills or sgpr_spills:
        lines.append(
            f"spills > 0: {vgpr_spills} VGPR and {sgpr_spills} SGPR spills, {scratch_bytes} B scratch per "
            "lane: reduce live values or relax the register cap"
        )
    elif scratch_bytes:
        lines.append(f"scratch {scratch_bytes} B per lane without spills: a private array or dynamic stack")
    if census:
        loop = census.get("hottest_loop")
        if isinstance(loop, dict):
            counts = loop.get("counts", {})
            if counts.get("scratch"):
                lines.append(f"hottest loop touches scratch {counts['scratch']} times per trip")
            if (
                counts.get("s_waitcnt", 0)
                and counts.get("total", 0)
                and counts["s_waitcnt"] * 4 > counts["total"]
            ):
                lines.append(
                    f"hottest loop waits often: {counts['s_waitcnt']} s_waitcnt in {counts['total']} "
                    "instructions (little latency hiding)"
                )
    if not lines:
        lines.append(f"no limiter below the {occ.max_waves} waves/SIMD hardware cap; no spills")
    return lines
