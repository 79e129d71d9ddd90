"""Legacy rocprof (v1, ``rocprof --stats --timestamp on``): results.csv and results.stats.csv.

results.csv columns: Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr, then either
arch_vgpr,accum_vgpr,sgpr,wave_size (ROCm 5.x) or vgpr,sgpr,fbar (older), then sig,obj, any counters,
and with --timestamp on: DispatchNs,BeginNs,EndNs,CompleteNs (some versions add DurationNs).
Kernel names end in ``.kd`` or `` [clone .kd]``.
results.stats.csv: "Name","Calls","TotalDurationNs","AverageNs","Percentage".
"""

from __future__ import annotations

from workers.profilers.rocprof_common import (
    DispatchRow,
    KernelStat,
    ProfileFormatError,
    clean_kernel_name,
    read_csv,
    resources_of,
    time_span,
    to_float,
    to_int,
)

RESULTS_REQUIRED = ("Index", "KernelName", "gpu-id", "queue-id", "grd", "wgr", "lds", "scr", "sgpr")
STATS_COLUMNS = ("Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage")
RESOURCE_COLUMNS: dict[str, tuple[str, ...]] = {
    "lds": ("lds",),
    "scratch": ("scr",),
    "vgpr": ("arch_vgpr", "vgpr"),
    "agpr": ("accum_vgpr",),
    "sgpr": ("sgpr",),
    "grid": ("grd",),
    "workgroup": ("wgr",),
    "wave_size": ("wave_size",),
    "fbar": ("fbar",),
}


def is_results(header: list[str]) -> bool:
    return all(col in header for col in RESULTS_REQUIRED)


def is_stats(header: list[str]) -> bool:
    return tuple(header[:5]) == STATS_COLUMNS and "MinNs" not in header


def parse_results(text: str, source: str = "results.csv") -> list[DispatchRow]:
    header, rows = read_csv(text, source)
    if not is_results(header):
        raise ProfileFormatError("not a rocprof results.csv header", line=1, source=source)
    if "BeginNs" not in header or "EndNs" not in header:
        raise ProfileFormatError("results.csv has no BeginNs/EndNs: capture with `--timestamp on`", 1, source)
    col = {h: i for i, h in enumerate(header)}
    out = []
    for index, (line, f) in enumerate(rows):
        start, end = time_span(f, col, ("BeginNs", "BeginNs"), ("EndNs", "EndNs"), line, source)
        resources = resources_of(f, col, RESOURCE_COLUMNS, line, source)
        out.append(
            DispatchRow(
                kernel=clean_kernel_name(f[col["KernelName"]]),
                start_ns=start,
                end_ns=end,
                agent=f[col["gpu-id"]].strip(),
                queue=f[col["queue-id"]].strip(),
                dispatch_id=to_int(f[col["Index"]], "Index", line, source),
                index=index,
                resources=resources,
            )
        )
    return out


def parse_stats(text: str, source: str = "results.stats.csv") -> list[KernelStat]:
    header, rows = read_csv(text, source)
    if not is_stats(header):
        raise ProfileFormatError("not a rocprof results.stats.csv header", line=1, source=source)
    return [
        KernelStat(
            kernel=clean_kernel_name(f[0]),
            calls=to_int(f[1], "Calls", line, source),
            total_ns=to_int(f[2], "TotalDurationNs", line, source),
            average_ns=to_float(f[3], "AverageNs", line, source),
            percentage=to_float(f[4], "Percentage", line, source),
        )
        for line, f in rows
    ]
