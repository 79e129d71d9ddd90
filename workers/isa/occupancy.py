"""Waves per SIMD from a kernel's resources, per arch, and which resource binds.

Numbers and rules follow LLVM's AMDGPU backend (lib/Target/AMDGPU/Utils/AMDGPUBaseInfo.cpp and
GCNSubtarget.cpp), which is what the compiler's own "Occupancy" remark reports:

- VGPRs: waves = min(max_waves, total // align(vgprs, granule)); gfx906 has 256 per lane per SIMD with
  a granule of 4 and 10 waves max; gfx90a/gfx942/gfx950 have a unified 512-entry VGPR+AGPR file with a
  granule of 8 and 8 waves max, where a kernel using AGPRs needs align(vgpr, 4) + agpr registers
  (getTotalNumVGPRs with has90AInsts).
- SGPRs (GFX8/GFX9): 800 per SIMD (getTotalNumSGPRs), allocation granule 16, 102 addressable per wave;
  GCNSubtarget::getOccupancyWithNumSGPRs maps <=80 → 10, <=88 → 9, <=100 → 8, else 7 waves.
- LDS: 64 KiB per CU (160 KiB on gfx950); workgroups per CU = LDS // align(lds, 512 B granule of GFX9's
  LDS_SIZE field in 128-dword units).
- Workgroups: at most 16 per CU, 40 when a workgroup is a single wave (getMaxWorkGroupsPerCU);
  a workgroup's waves spread over the 4 SIMDs of a CU.
"""

from __future__ import annotations

from dataclasses import dataclass

SIMDS_PER_CU = 4


@dataclass(frozen=True)
class ArchLimits:
    arch: str
    vgprs_per_simd: int  # per lane
    vgpr_granule: int
    unified_agprs: bool  # AGPRs share the VGPR file (gfx90a and later)
    max_waves_per_simd: int
    sgprs_per_simd: int
    sgpr_granule: int
    max_sgprs_per_wave: int
    lds_per_cu: int
    lds_granule: int
    max_workgroups_per_cu: int = 16
    max_workgroups_per_cu_single_wave: int = 40


ARCH_LIMITS: dict[str, ArchLimits] = {
    "gfx906": ArchLimits("gfx906", 256, 4, False, 10, 800, 16, 102, 64 * 1024, 512),
    "gfx908": ArchLimits("gfx908", 256, 4, False, 10, 800, 16, 102, 64 * 1024, 512),
    "gfx90a": ArchLimits("gfx90a", 512, 8, True, 8, 800, 16, 102, 64 * 1024, 512),
    "gfx942": ArchLimits("gfx942", 512, 8, True, 8, 800, 16, 102, 64 * 1024, 512),
    "gfx950": ArchLimits("gfx950", 512, 8, True, 8, 800, 16, 102, 160 * 1024, 512),
}


def limits_for(arch: str) -> ArchLimits:
    try:
        return ARCH_LIMITS[arch]
    except KeyError:
        raise KeyError(f"no occupancy table for arch {arch!r}; known: {', '.join(ARCH_LIMITS)}") from None


def _align(value: int, granule: int) -> int:
    return -(-value // granule) * granule


@dataclass(frozen=True)
class Occupancy:
    waves_per_simd: int
    limiter: str  # "vgpr", "sgpr", "lds", "workgroup" or "max_waves" (nothing but the hardware cap)
    by_vgpr: int
    by_sgpr: int
    by_lds: int
    by_workgroup: int
    max_waves: int
    vgprs_allocated: int
    waves_per_workgroup: int
    workgroups_per_cu: int


def total_vgprs(limits: ArchLimits, vgpr: int, agpr: int) -> int:
    """Registers one lane holds in the (possibly unified) VGPR file, before granule rounding."""
    if limits.unified_agprs and agpr > 0:
        return _align(vgpr, 4) + agpr
    return max(vgpr, agpr)


def waves_by_vgpr(limits: ArchLimits, vgpr: int, agpr: int = 0) -> tuple[int, int]:
    """(waves per SIMD the VGPR file allows, registers allocated per lane)."""
    allocated = _align(max(1, total_vgprs(limits, vgpr, agpr)), limits.vgpr_granule)
    return min(limits.max_waves_per_simd, max(0, limits.vgprs_per_simd // allocated)), allocated


def waves_by_sgpr(limits: ArchLimits, sgpr: int) -> int:
    """GCNSubtarget::getOccupancyWithNumSGPRs for GFX8/GFX9, capped by the arch's wave limit."""
    if sgpr <= 80:
        waves = 10
    elif sgpr <= 88:
        waves = 9
    elif sgpr <= 100:
        waves = 8
    else:
        waves = 7
    return min(limits.max_waves_per_simd, waves)


def occupancy(
    arch: str, vgpr: int, agpr: int, sgpr: int, lds_bytes: int, workgroup_size: int, wave_size: int = 64
) -> Occupancy:
    """Waves per SIMD for one kernel launched with ``workgroup_size`` threads; the tightest limit wins."""
    limits = limits_for(arch)
    cap = limits.max_waves_per_simd
    by_vgpr, allocated = waves_by_vgpr(limits, vgpr, agpr)
    by_sgpr = waves_by_sgpr(limits, sgpr)
    waves_per_wg = max(1, -(-max(1, workgroup_size) // wave_size))

    wg_cap = (
        limits.max_workgroups_per_cu_single_wave
        if waves_per_wg == 1
        else min(limits.max_workgroups_per_cu, limits.max_workgroups_per_cu_single_wave // waves_per_wg)
    )
    by_workgroup = min(cap, (wg_cap * waves_per_wg) // SIMDS_PER_CU) if wg_cap else 0
    if lds_bytes > 0:
        wg_by_lds = limits.lds_per_cu // _align(lds_bytes, limits.lds_granule)
        by_lds = min(cap, (wg_by_lds * waves_per_wg) // SIMDS_PER_CU)
        if wg_by_lds > 0 and by_lds == 0:
            by_lds = 1  # some SIMDs hold a wave: count it as one rather than none
    else:
        wg_by_lds = wg_cap
        by_lds = cap
    candidates = [("vgpr", by_vgpr), ("sgpr", by_sgpr), ("lds", by_lds), ("workgroup", by_workgroup)]
    waves = min(cap, *(value for _, value in candidates))
    limiter = "max_waves"
    if waves < cap:
        limiter = next(name for name, value in candidates if value == waves)
    workgroups = min(wg_cap, wg_by_lds, (waves * SIMDS_PER_CU) // waves_per_wg if waves_per_wg else 0)
    return Occupancy(
        waves_per_simd=waves,
        limiter=limiter,
        by_vgpr=by_vgpr,
        by_sgpr=by_sgpr,
        by_lds=by_lds,
        by_workgroup=by_workgroup,
        max_waves=cap,
        vgprs_allocated=allocated,
        waves_per_workgroup=waves_per_wg,
        workgroups_per_cu=workgroups,
    )
