"""Import of hand-made rocprof / rocprofv3 captures: per-dispatch rows plus a per-kernel summary.

Engineers run rocprof on an MI50 themselves; this stores what they captured as it was (kernel
name, start, end, duration, agent, queue, resources) so it sits beside sweep results. Each file's
kind is recognised from its header (workers/profilers/rocprof_detect.py). Parsing is all or
nothing: any unknown or damaged file is refused with its line number and nothing is stored.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from service.db.models import Capture, CaptureDispatch, CaptureKernelStat
from service.imports.symbols import match_variant
from workers.profilers.rocprof_common import DispatchRow, KernelStat, ProfileFormatError
from workers.profilers.rocprof_detect import ParsedCapture, parse_capture

MAX_FILES = 64
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class FileProblem:
    """Why one file was refused: its position in the request, its name, the 1-based line (0: whole file)."""

    index: int
    name: str
    line: int
    message: str

    def __str__(self) -> str:
        where = f"{self.name}:{self.line}" if self.line else self.name
        return f"{where}: {self.message}"


class CaptureImportError(ValueError):
    """One or more files are unknown or damaged; nothing was stored."""

    def __init__(self, problems: Sequence[FileProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("rocprof import refused:\n  " + "\n  ".join(str(p) for p in self.problems))


def _data_lines(text: str) -> list[int]:
    """1-based line numbers of the data rows in parser order (header and blank lines skipped)."""
    reader = csv.reader(io.StringIO(text))
    lines: list[int] = []
    seen_header = False
    for fields in reader:
        if not fields or all(not f.strip() for f in fields):
            continue
        if seen_header:
            lines.append(reader.line_num)
        seen_header = True
    return lines


def _check_ranges(parsed: ParsedCapture, text: str) -> None:
    """Values a BIGINT column cannot hold (or negative ones) are damage too."""
    lines = _data_lines(text)
    for position, row in enumerate(parsed.dispatches):
        for value in (row.start_ns, row.end_ns, row.dispatch_id or 0, *row.resources.values()):
            if not 0 <= value <= INT64_MAX:
                raise ProfileFormatError(f"value {value} out of range", lines[position], parsed.source)
    for position, stat in enumerate(parsed.stats):
        for value in (stat.calls, stat.total_ns, stat.min_ns or 0, stat.max_ns or 0):
            if not 0 <= value <= INT64_MAX:
                raise ProfileFormatError(f"value {value} out of range", lines[position], parsed.source)


def _encodable(text: str) -> bool:
    """JSON may carry lone surrogates; no database column can hold them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_files(files: Sequence[tuple[str, str]]) -> list[ParsedCapture]:
    """Parse every (name, text); raises CaptureImportError naming each bad file and line."""
    if not files:
        raise CaptureImportError([FileProblem(0, "", 0, "no files given")])
    if len(files) > MAX_FILES:
        raise CaptureImportError([FileProblem(MAX_FILES, "", 0, f"at most {MAX_FILES} files per capture")])
    parsed: list[ParsedCapture] = []
    problems: list[FileProblem] = []
    for index, (name, text) in enumerate(files):
        bad = next((what for what, value in (("name", name), ("text", text)) if not _encodable(value)), None)
        if bad is not None:
            problems.append(
                FileProblem(index, name.encode("utf-8", "replace").decode(), 0, f"{bad} is not valid Unicode")
            )
            continue
        try:
            capture = parse_capture(text, name)
            _check_ranges(capture, text)
            parsed.append(capture)
        except ProfileFormatError as error:
            message = str(error)
            prefix = f"{name}:{error.line}: " if error.line else f"{name}: "
            if message.startswith(prefix):
                message = message[len(prefix) :]
            problems.append(FileProblem(index, name, error.line, message))
    if problems:
        raise CaptureImportError(problems)
    return parsed


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def summarize(dispatches: Iterable[tuple[str, int]], stats: Iterable[KernelStat]) -> list[dict[str, Any]]:
    """Per kernel {kernel, calls, median_ns, min_ns, max_ns, total_ns, average_ns, source}, most total first.

    Dispatch rows (kernel, duration) are the truth; a kernel seen only in a statistics file takes
    its figures from there, and its median is null (those files carry no median, only the average).
    `source` says which: "dispatches" or "statistics file".
    """
    durations: dict[str, list[int]] = defaultdict(list)
    for kernel, duration in dispatches:
        durations[kernel].append(duration)
    out: dict[str, dict[str, Any]] = {
        kernel: {
            "kernel": kernel,
            "calls": len(values),
            "median_ns": _number(statistics.median(values)),
            "min_ns": min(values),
            "max_ns": max(values),
            "total_ns": sum(values),
            "average_ns": _number(round(statistics.fmean(values), 3)),
            "source": "dispatches",
        }
        for kernel, values in durations.items()
    }
    from_stats: dict[str, dict[str, Any]] = {}
    for stat in stats:
        if stat.kernel in out:
            continue
        entry = from_stats.setdefault(
            stat.kernel,
            dict(kernel=stat.kernel, calls=0, median_ns=None, min_ns=None, max_ns=None, total_ns=0,
                 average_ns=None, source="statistics file"),
        )  # fmt: skip
        entry["calls"] += stat.calls
        entry["total_ns"] += stat.total_ns
        calls = entry["calls"]
        entry["average_ns"] = _number(round(entry["total_ns"] / calls, 3)) if calls else None
        for key, value, pick in (("min_ns", stat.min_ns, min), ("max_ns", stat.max_ns, max)):
            if value is not None:
                entry[key] = value if entry[key] is None else pick(entry[key], value)
    out.update(from_stats)
    return sorted(out.values(), key=lambda e: (-e["total_ns"], e["kernel"]))


def _dispatch_values(capture_id: int, file_index: int, row: DispatchRow) -> dict[str, Any]:
    return {
        "capture_id": capture_id,
        "file_index": file_index,
        "seq": row.index,
        "kernel": row.kernel,
        "start_ns": row.start_ns,
        "end_ns": row.end_ns,
        "duration_ns": row.duration_ns,
        "agent": row.agent[:80],
        "queue": row.queue[:80],
        "dispatch_id": row.dispatch_id,
        "resources": dict(row.resources),
    }


def store_capture(
    session: Session, parsed: Sequence[ParsedCapture], label: str = "", imported_by: str = ""
) -> Capture:
    """Add the capture and all its rows inside the caller's transaction (commit is the caller's)."""
    capture = Capture(
        tool="rocprof",
        label=label,
        imported_by=imported_by,
        files=[{"name": p.source, "kind": p.kind, "rows": len(p.dispatches) + len(p.stats)} for p in parsed],
    )
    session.add(capture)
    session.flush()
    rows = [_dispatch_values(capture.id, i, row) for i, p in enumerate(parsed) for row in p.dispatches]
    if rows:
        session.execute(insert(CaptureDispatch), rows)
    stats = [
        {
            "capture_id": capture.id,
            "file_index": i,
            "kernel": s.kernel,
            "calls": s.calls,
            "total_ns": s.total_ns,
            "average_ns": s.average_ns,
            "percentage": s.percentage,
            "min_ns": s.min_ns,
            "max_ns": s.max_ns,
            "stddev_ns": s.stddev_ns,
        }
        for i, p in enumerate(parsed)
        for s in p.stats
    ]
    if stats:
        session.execute(insert(CaptureKernelStat), stats)
    return capture


def _utc_iso(moment: datetime | None) -> str | None:
    """SQLite hands back naive datetimes (stored as UTC); answer the same string on every database."""
    if moment is None:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


def capture_summary(session: Session, capture_id: int) -> dict[str, Any] | None:
    """The stored capture with its per-kernel summary, computed from the stored rows; None if absent."""
    capture = session.get(Capture, capture_id)
    if capture is None:
        return None
    dispatches = session.execute(
        select(CaptureDispatch.kernel, CaptureDispatch.duration_ns).where(
            CaptureDispatch.capture_id == capture_id
        )
    ).all()
    stat_query = select(CaptureKernelStat).where(CaptureKernelStat.capture_id == capture_id)
    stat_rows = session.scalars(stat_query.order_by(CaptureKernelStat.id)).all()
    stats = [
        KernelStat(s.kernel, s.calls, s.total_ns, s.average_ns, s.percentage, s.min_ns, s.max_ns, s.stddev_ns)
        for s in stat_rows
    ]
    kernels = summarize(((k, int(d)) for k, d in dispatches), stats)
    for kernel in kernels:  # name the Tunebase variant a kernel is, where its symbol says so
        match = match_variant(kernel["kernel"])
        kernel["package"] = match["package"] if match else None
        kernel["variant"] = match["variant"] if match else None
        kernel["format"] = match["format"] if match else None
    return {
        "id": capture.id,
        "label": capture.label,
        "created_at": _utc_iso(capture.created_at),
        "files": list(capture.files),
        "dispatches": len(dispatches),
        "kernels": kernels,
    }


def list_captures(session: Session, limit: int, offset: int) -> dict[str, Any]:
    """Stored captures, newest first, with their file kinds and row counts (the list envelope)."""
    total = session.scalar(select(func.count()).select_from(Capture)) or 0
    captures = session.scalars(select(Capture).order_by(Capture.id.desc()).limit(limit).offset(offset)).all()
    counts = dict(
        session.execute(
            select(CaptureDispatch.capture_id, func.count())
            .where(CaptureDispatch.capture_id.in_([c.id for c in captures]))
            .group_by(CaptureDispatch.capture_id)
        ).all()
    )
    items = [
        {
            "id": c.id,
            "label": c.label,
            "created_at": _utc_iso(c.created_at),
            "imported_by": c.imported_by,
            "files": list(c.files),
            "dispatches": int(counts.get(c.id, 0)),
        }
        for c in captures
    ]
    return {"total": total, "limit": limit, "offset": offset, "items": items}
