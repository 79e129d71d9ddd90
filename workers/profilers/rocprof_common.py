"""Shared shapes and CSV reading for the rocprof parsers (rocprofv3 and legacy rocprof v1)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass, field


class ProfileFormatError(ValueError):
    """An unknown or damaged profiler file; ``line`` is 1-based (0 when the whole file is at fault)."""

    def __init__(self, message: str, line: int = 0, source: str = "") -> None:
        where = f"{source}:{line}: " if source and line else (f"{source}: " if source else "")
        super().__init__(f"{where}{message}")
        self.line = line
        self.source = source


@dataclass
class DispatchRow:
    """One kernel dispatch as a profiler saw it (times in ns on the profiler's clock)."""

    kernel: str  # demangled-ish name as printed, without a trailing ``.kd`` / `` [clone .kd]``
    start_ns: int
    end_ns: int
    agent: str = ""
    queue: str = ""
    dispatch_id: int | None = None
    index: int = 0  # order of the row in its file
    resources: dict[str, int] = field(default_factory=dict)  # lds, scratch, vgpr, agpr, sgpr, grid, workgroup

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class KernelStat:
    """One row of a per-kernel statistics file (kernel_stats.csv / results.stats.csv)."""

    kernel: str
    calls: int
    total_ns: int
    average_ns: float
    percentage: float
    min_ns: int | None = None
    max_ns: int | None = None
    stddev_ns: float | None = None


_KD_SUFFIX = re.compile(r"(\s*\[clone \.kd\]|\.kd)$")


def clean_kernel_name(name: str) -> str:
    """``foo(float*) [clone .kd]`` / ``foo.kd`` → the kernel's own name."""
    return _KD_SUFFIX.sub("", name.strip())


def read_csv(text: str, source: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """(header, [(line number, fields)]) skipping blank lines; raises on ragged rows."""
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    rows: list[tuple[int, list[str]]] = []
    try:
        for fields in reader:
            line = reader.line_num
            if not fields or all(not f.strip() for f in fields):
                continue
            if header is None:
                header = [f.strip() for f in fields]
                continue
            if len(fields) != len(header):
                raise ProfileFormatError(
                    f"expected {len(header)} fields, found {len(fields)}", line=line, source=source
                )
            rows.append((line, fields))
    except csv.Error as exc:
        raise ProfileFormatError(f"malformed CSV: {exc}", line=reader.line_num, source=source) from None
    if header is None:
        raise ProfileFormatError("empty file", source=source)
    return header, rows


def to_int(value: str, column: str, line: int, source: str) -> int:
    text = value.strip()
    try:
        return int(text)
    except ValueError:
        try:
            as_float = float(text)
        except ValueError:
            raise ProfileFormatError(f"column {column!r}: {value!r} is not a number", line, source) from None
        if as_float != as_float or as_float in (float("inf"), float("-inf")):
            raise ProfileFormatError(f"column {column!r}: {value!r} is not finite", line, source) from None
        return int(as_float)


def time_span(
    fields: list[str],
    col: Mapping[str, int],
    begin: tuple[str, str],
    end: tuple[str, str],
    line: int,
    source: str,
) -> tuple[int, int]:
    """(start, end) ns from the (column key, label) pairs; an end before its start is a damaged row."""
    start = to_int(fields[col[begin[0]]], begin[1], line, source)
    stop = to_int(fields[col[end[0]]], end[1], line, source)
    if stop < start:
        raise ProfileFormatError(f"{end[1]} before {begin[1]}", line, source)
    return start, stop


def resources_of(
    fields: list[str], col: Mapping[str, int], columns: Mapping[str, tuple[str, ...]], line: int, source: str
) -> dict[str, int]:
    """Resource key -> value from the first of its header names present (generations name them apart)."""
    resources: dict[str, int] = {}
    for key, names in columns.items():
        for name in names:
            if name in col:
                resources[key] = to_int(fields[col[name]], name, line, source)
                break
    return resources


def to_float(value: str, column: str, line: int, source: str) -> float:
    try:
        return float(value.strip())
    except ValueError:
        raise ProfileFormatError(f"column {column!r}: {value!r} is not a number", line, source) from None
