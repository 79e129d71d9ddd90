"""Recognise which of the four rocprof file kinds a text is, from its header, and parse it."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field

from workers.profilers import rocprof_v1, rocprofv3
from workers.profilers.rocprof_common import DispatchRow, KernelStat, ProfileFormatError

KINDS = ("rocprofv3_kernel_trace", "rocprofv3_kernel_stats", "rocprof_results", "rocprof_stats")


@dataclass
class ParsedCapture:
    kind: str
    source: str
    dispatches: list[DispatchRow] = field(default_factory=list)
    stats: list[KernelStat] = field(default_factory=list)


def _header(text: str, source: str) -> list[str]:
    for line in text.splitlines():
        if line.strip():
            try:
                return [h.strip() for h in next(csv.reader([line]))]
            except (csv.Error, StopIteration):
                break
    raise ProfileFormatError("empty file or unreadable header", line=1, source=source)


def detect(text: str, source: str = "") -> str:
    header = _header(text, source)
    if rocprofv3.is_kernel_trace(header):
        return "rocprofv3_kernel_trace"
    if rocprofv3.is_kernel_stats(header):
        return "rocprofv3_kernel_stats"
    if rocprof_v1.is_results(header):
        return "rocprof_results"
    if rocprof_v1.is_stats(header):
        return "rocprof_stats"
    raise ProfileFormatError(
        "unknown file: not a rocprofv3 kernel_trace/kernel_stats CSV nor a rocprof results/results.stats CSV",
        line=1,
        source=source,
    )


def parse_capture(text: str, source: str = "") -> ParsedCapture:
    """Detect the kind and parse; raises ProfileFormatError (with a line number) for anything bad."""
    if "\x00" in text:
        raise ProfileFormatError(
            "binary data in a CSV file", line=text[: text.index("\x00")].count("\n") + 1, source=source
        )
    kind = detect(text, source)
    if kind == "rocprofv3_kernel_trace":
        return ParsedCapture(kind, source, dispatches=rocprofv3.parse_kernel_trace(text, source))
    if kind == "rocprofv3_kernel_stats":
        return ParsedCapture(kind, source, stats=rocprofv3.parse_kernel_stats(text, source))
    if kind == "rocprof_results":
        return ParsedCapture(kind, source, dispatches=rocprof_v1.parse_results(text, source))
    return ParsedCapture(kind, source, stats=rocprof_v1.parse_stats(text, source))
