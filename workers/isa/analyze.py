"""One call from a file's bytes to the per-kernel report of DESIGN §7 (`tunebase isa`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workers.isa.att import AttStats, att_summary
from workers.isa.bundle import NotACodeObject, code_objects
from workers.isa.census import census
from workers.isa.diagnosis import diagnose
from workers.isa.isolate import Disassembly, disassemble_isolated
from workers.isa.liveness import analyse, liveness
from workers.isa.loop_census import loop_census
from workers.isa.metadata import KernelMeta, arch_vgpr_count, read_metadata
from workers.isa.occupancy import ARCH_LIMITS, occupancy


def kernel_report(
    arch: str, meta: KernelMeta, functions: dict[str, Any], workgroup_size: int | None = None
) -> dict[str, Any]:
    """The §7 record of one kernel; ``functions`` maps symbol name → disassembled Function."""
    wg = workgroup_size or meta.max_flat_workgroup_size
    arch_vgpr = arch_vgpr_count(arch, meta)
    report: dict[str, Any] = {
        "name": meta.name,
        "symbol": meta.symbol,
        "arch": arch,
        "vgpr": meta.vgpr_count,
        "arch_vgpr": arch_vgpr,
        "agpr": meta.agpr_count,
        "sgpr": meta.sgpr_count,
        "lds_bytes": meta.group_segment_fixed_size,
        "scratch_bytes": meta.private_segment_fixed_size,
        "vgpr_spills": meta.vgpr_spill_count,
        "sgpr_spills": meta.sgpr_spill_count,
        "wavefront_size": meta.wavefront_size,
        "workgroup_size": wg,
        "waves_per_simd": None,
        "limiter": None,
        "census": None,
        "liveness": None,
        "hot_loop": None,
        "diagnosis": [],
    }
    function = functions.get(meta.name)
    kernel_census = census(function, meta.private_segment_fixed_size > 0) if function is not None else None
    report["census"] = kernel_census
    if function is not None:
        flow = analyse(function, meta.private_segment_fixed_size > 0)
        report["liveness"] = liveness(function, flow, arch_vgpr, meta.agpr_count)
        report["hot_loop"] = loop_census(function, flow)
    if arch in ARCH_LIMITS:
        occ = occupancy(
            arch,
            arch_vgpr,
            meta.agpr_count,
            meta.sgpr_count,
            meta.group_segment_fixed_size,
            wg,
            meta.wavefront_size,
        )
        report["waves_per_simd"] = occ.waves_per_simd
        report["limiter"] = occ.limiter
        report["occupancy"] = {
            "vgpr": occ.by_vgpr,
            "sgpr": occ.by_sgpr,
            "lds": occ.by_lds,
            "workgroup": occ.by_workgroup,
            "max_waves": occ.max_waves,
            "vgprs_allocated": occ.vgprs_allocated,
            "workgroups_per_cu": occ.workgroups_per_cu,
        }
        report["diagnosis"] = diagnose(
            arch,
            arch_vgpr,
            meta.agpr_count,
            meta.sgpr_count,
            meta.group_segment_fixed_size,
            meta.private_segment_fixed_size,
            meta.vgpr_spill_count,
            meta.sgpr_spill_count,
            wg,
            occ,
            kernel_census,
        )
    else:
        report["diagnosis"] = [f"no occupancy table for {arch}; resources only"]
    return report


def disassembly_note(disassembly: Disassembly | None, symbol: str) -> tuple[str, str | None]:
    """(the report's ``disassembler`` field, the kernel's ``disassembly_error``) for one kernel."""
    if disassembly is None:
        return "", None
    error = disassembly.error_for(symbol)
    if error is None:
        return disassembly.engine, None
    return f"no disassembly: {error}", error


def analyze_bytes(
    data: bytes, with_disassembly: bool = True, att: AttStats | None = None
) -> list[dict[str, Any]]:
    """Reports for every kernel of every AMDGPU code object in ``data``; raises NotACodeObject.

    A disassembler failure (even an LLVM abort) never raises: that kernel's report carries
    ``disassembly_error`` and no census, the rest of the report is still filled from the metadata.
    """
    reports: list[dict[str, Any]] = []
    for obj in code_objects(data):
        meta = read_metadata(obj.data)
        disassembly = disassemble_isolated(obj.data, meta.arch) if with_disassembly else None
        functions = disassembly.functions if disassembly is not None else {}
        for kernel in meta.kernels:
            report = kernel_report(meta.arch, kernel, functions)
            report["target"] = meta.target or obj.target
            report["disassembler"], report["disassembly_error"] = disassembly_note(disassembly, kernel.name)
            if meta.warnings:
                report["diagnosis"] = [*meta.warnings, *report["diagnosis"]]
            if att is not None and kernel.name in functions:
                report["att"] = att_summary(att, functions[kernel.name])
            reports.append(report)
    return reports


def analyze_file(
    path: str | Path, with_disassembly: bool = True, att: AttStats | None = None
) -> list[dict[str, Any]]:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise NotACodeObject(f"cannot read {path}: {exc}") from None
    return analyze_bytes(data, with_disassembly, att)
