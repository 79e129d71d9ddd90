"""rocprofv3 CSV output (``--kernel-trace --output-format csv``): kernel_trace.csv and kernel_stats.csv.

Header generations seen in the field (all handled; columns are looked up by name, case-insensitively):
- ROCm 6.0/6.1: "Kind","Agent_Id","Queue_Id","Kernel_Id","Kernel_Name","Correlation_Id","Start_Timestamp",
  "End_Timestamp","Private_Segment_Size","Group_Segment_Size","Workgroup_Size_X".."Grid_Size_Z"
  (integer agent)
- ROCm 6.2: the same plus "Thread_Id","Dispatch_Id" after Queue_Id
- ROCm 6.3+/7.x: "Stream_Id" added, agent printed as "Agent N", resources as "LDS_Block_Size","Scratch_Size",
  "VGPR_Count","Accum_VGPR_Count","SGPR_Count"; ``rocpd convert`` adds a leading "Guid" and writes
  "Lds_Block_Size"/"Vgpr_Count".
kernel_stats.csv: "Name","Calls","TotalDurationNs","AverageNs","Percentage","MinNs","MaxNs","StdDev".
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

TRACE_REQUIRED = ("kind", "agent_id", "queue_id", "kernel_name", "start_timestamp", "end_timestamp")
STATS_REQUIRED = ("name", "calls", "totaldurationns", "averagens", "percentage", "minns", "maxns")

# resource key → header names across generations (lower case)
RESOURCE_COLUMNS: dict[str, tuple[str, ...]] = {
    "lds": ("lds_block_size", "group_segment_size"),
    "scratch": ("scratch_size", "private_segment_size"),
    "vgpr": ("vgpr_count",),
    "agpr": ("accum_vgpr_count",),
    "sgpr": ("sgpr_count",),
    "workgroup_x": ("workgroup_size_x",),
    "workgroup_y": ("workgroup_size_y",),
    "workgroup_z": ("workgroup_size_z",),
    "grid_x": ("grid_size_x",),
    "grid_y": ("grid_size_y",),
    "grid_z": ("grid_size_z",),
}


def is_kernel_trace(header: list[str]) -> bool:
    names = {h.lower() for h in header}
    return all(col in names for col in TRACE_REQUIRED)


def is_kernel_stats(header: list[str]) -> bool:
    names = {h.lower() for h in header}
    return all(col in names for col in STATS_REQUIRED)


def normalise_agent(value: str) -> str:
    """ "Agent 2" and 2 name the same agent: keep the number as text."""
    text = value.strip()
    return text[len("agent") :].strip() if text.lower().startswith("agent") else text


def parse_kernel_trace(text: str, source: str = "kernel_trace.csv") -> list[DispatchRow]:
    header, rows = read_csv(text, source)
    if not is_kernel_trace(header):
        raise ProfileFormatError("not a rocprofv3 kernel_trace.csv header", line=1, source=source)
    col = {h.lower(): i for i, h in enumerate(header)}
    out: list[DispatchRow] = []
    for index, (line, fields) in enumerate(rows):
        if fields[col["kind"]].strip() != "KERNEL_DISPATCH":
            raise ProfileFormatError(f"unexpected Kind {fields[col['kind']]!r}", line, source)
        begin, end = ("start_timestamp", "Start_Timestamp"), ("end_timestamp", "End_Timestamp")
        start, stop = time_span(fields, col, begin, end, line, source)
        resources = resources_of(fields, col, RESOURCE_COLUMNS, line, source)
        dispatch_id = (
            to_int(fields[col["dispatch_id"]], "Dispatch_Id", line, source) if "dispatch_id" in col else None
        )
        out.append(
            DispatchRow(
                kernel=clean_kernel_name(fields[col["kernel_name"]]),
                start_ns=start,
                end_ns=stop,
                agent=normalise_agent(fields[col["agent_id"]]),
                queue=fields[col["queue_id"]].strip(),
                dispatch_id=dispatch_id,
                index=index,
                resources=resources,
            )
        )
    return out


def parse_kernel_stats(text: str, source: str = "kernel_stats.csv") -> list[KernelStat]:
    header, rows = read_csv(text, source)
    if not is_kernel_stats(header):
        raise ProfileFormatError("not a rocprofv3 kernel_stats.csv header", line=1, source=source)
    col = {h.lower(): i for i, h in enumerate(header)}
    stats = []
    for line, f in rows:
        stats.append(
            KernelStat(
                kernel=clean_kernel_name(f[col["name"]]),
                calls=to_int(f[col["calls"]], "Calls", line, source),
                total_ns=to_int(f[col["totaldurationns"]], "TotalDurationNs", line, source),
                average_ns=to_float(f[col["averagens"]], "AverageNs", line, source),
                percentage=to_float(f[col["percentage"]], "Percentage", line, source),
                min_ns=to_int(f[col["minns"]], "MinNs", line, source),
                max_ns=to_int(f[col["maxns"]], "MaxNs", line, source),
                stddev_ns=to_float(f[col["stddev"]], "StdDev", line, source) if "stddev" in col else None,
            )
        )
    return stats
