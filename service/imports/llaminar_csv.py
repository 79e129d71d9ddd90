"""Import of Llaminar ROCm NativeVNNI trainer CSVs (prefill and decode schemas).

Rows become imported summaries: measurements with source="llaminar-csv" and no
dispatch rows, so the winners and the table generator use them like sweep
results. The trainer reports min/mean/stddev over its timed runs but no median; its own
ranking statistic, min_us, is stored as the point estimate (median_us), and
n_dispatches=0 marks that no per-dispatch data stands behind it. The number of timed
runs (``summary_samples``) comes from an optional ``samples`` column, else from the
request, else Llaminar's trainer constant (20): winners are then judged from min, mean,
stddev and that count (service.statistics.summaries).

Repeated rows (same arch, format, M, N, K and variant, e.g. two trainer runs concatenated):
an exact duplicate row counts once; repeats that agree within their noise are pooled into
one summary of all their runs; repeats that disagree beyond it are an error naming both
lines, unless the request asks ``repeats="min"`` (Llaminar's analyzer rule: keep the row
with the lowest min_us). Every pooled or dropped row is reported back, never silently.

Parsing is all-or-nothing: every bad row is reported with file and line number,
and nothing is stored unless every row of every file is good.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernels.arches import ARCH_NAMES
from kernels.formats.registry import FORMATS
from kernels.packages.loader import BUILTIN_FOR_PHASE
from service.db.models import Measurement, Variant
from service.statistics.summaries import LLAMINAR_TRAINER_RUNS, SummaryStats, ratio_interval
from service.tables.codecs import get_codec

PREFILL_HEADER: tuple[str, ...] = (
    "backend", "phase", "format", "codebook", "shape", "category", "m", "n", "k", "variant",
    "min_us", "mean_us", "stddev_us", "gflops", "cosine", "correctness_pass", "is_best",
)  # fmt: skip
DECODE_HEADER: tuple[str, ...] = (
    "backend", "phase", "format", "codebook", "shape", "m", "n", "k", "variant", "kb", "target_waves",
    "weight_bytes", "min_us", "mean_us", "stddev_us", "eff_bw_gbs", "bw_efficiency", "speedup_vs_int8",
    "theoretical_speedup", "kernel_efficiency", "cosine", "correctness_pass", "is_best",
)  # fmt: skip
OPTIONAL_COLUMNS: tuple[str, ...] = ("samples",)  # Tunebase extension: timed runs behind the row
ARCHES = ARCH_NAMES
SOURCE = "llaminar-csv"
MAX_SAMPLES = 1_000_000
Repeats = Literal["error", "min"]
REPEATS: tuple[str, ...] = ("error", "min")
# Repeats differing by less than this are never called contradictory (the winners' default min_effect).
REPEAT_TOLERANCE = 0.01

# Trainer spellings of prefill variants: N64/MT32/MB1/U2, N64/MT32/MB1 (unroll 4), N64_M32_MB1_UG2.
_PREFILL_SPELLING = re.compile(r"N(?P<n>\d+)[/_]M(?:T)?(?P<m>\d+)[/_]MB(?P<mb>\d+)(?:[/_]U(?:G)?(?P<u>\d+))?")


class CsvImportError(ValueError):
    """One or more rows are bad; `problems` holds `file:line: message` strings."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("llaminar CSV import failed:\n  " + "\n  ".join(self.problems))


@dataclass(frozen=True)
class ImportedRow:
    """One good row, normalised: canonical variant name, arch resolved."""

    source: str  # file:line
    arch: str
    phase: str
    format: str
    codebook: int
    shape: str
    m: int
    n: int
    k: int
    variant: str
    min_us: float
    mean_us: float
    stddev_us: float
    cosine: float | None
    parity_pass: bool
    is_best: bool
    samples: int | None = None  # timed runs; None: not in the file (the request's default applies)

    @property
    def key(self) -> tuple[str, str, str, int, int, int, str]:
        """What makes two rows the same measurement (the shape name does not)."""
        return (self.arch, self.phase, self.format, self.m, self.n, self.k, self.variant)

    def stats(self) -> SummaryStats:
        return SummaryStats(self.min_us, self.mean_us, self.stddev_us, self.samples or LLAMINAR_TRAINER_RUNS)


@dataclass(frozen=True)
class ParseResult:
    rows: tuple[ImportedRow, ...]
    skipped: tuple[str, ...]  # rows deliberately not imported (AUTO variants), with reasons
    repeats: tuple[str, ...] = ()  # repeated rows pooled, counted once or dropped, with the lines


def canonical_variant(phase: str, raw: str) -> str | None:
    """Trainer spelling -> canonical name; None for AUTO (the engine's own heuristic)."""
    value = raw.strip().upper()
    if value == "AUTO":
        return None
    if phase == "prefill":
        match = _PREFILL_SPELLING.fullmatch(value)
        if match is None:
            raise ValueError(f"variant {raw!r} is not a prefill variant (N{{n}}/MT{{m}}/MB{{mb}}/U{{u}})")
        name = f"N{match['n']}/MT{match['m']}/MB{match['mb']}/U{match['u'] or '4'}"
    else:
        name = value
    get_codec(phase).parse_variant(name)
    return name


def _int(row: dict[str, str], column: str, minimum: int | None = None) -> int:
    raw = (row.get(column) or "").strip()
    try:
        value = int(raw, 0)
    except ValueError:
        raise ValueError(f"{column}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{column}={value} must be >= {minimum}")
    return value


def _float(row: dict[str, str], column: str, positive: bool = False, optional: bool = False) -> float | None:
    raw = (row.get(column) or "").strip()
    if not raw and optional:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{column}={raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(
            f"{column}={raw!r} must be a finite {'positive' if positive else 'non-negative'} number"
        )
    return value


def _flag(row: dict[str, str], column: str) -> bool:
    raw = (row.get(column) or "").strip().lower()
    if raw in ("1", "true", "yes"):
        return True
    if raw in ("0", "false", "no"):
        return False
    raise ValueError(f"{column}={raw!r} is not 0/1")


def _parse_row(row: dict[str, str], schema: str, arch: str | None) -> ImportedRow | None:
    phase = (row.get("phase") or "").strip()
    if phase != schema:
        raise ValueError(f"phase={phase!r} in a {schema} CSV")
    backend = (row.get("backend") or "").strip()
    resolved = arch or (backend if backend in ARCHES else None)
    if resolved is None:
        raise ValueError(f"backend={backend!r} names no arch; pass the arch explicitly")
    fmt = (row.get("format") or "").strip().upper()
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    codebook = _int(row, "codebook")
    if codebook != FORMATS[fmt].codebook:
        raise ValueError(f"codebook {codebook} does not match {fmt} (codebook {FORMATS[fmt].codebook})")
    shape = (row.get("shape") or "").strip()
    if not shape.isprintable() or len(shape) > 120:
        raise ValueError(f"shape={shape!r} must be printable text of at most 120 characters")
    m, n, k = _int(row, "m", 1), _int(row, "n", 1), _int(row, "k", 1)
    variant = canonical_variant(phase, row.get("variant") or "")
    min_us = _float(row, "min_us", positive=True)
    mean_us = _float(row, "mean_us", positive=True)
    stddev_us = _float(row, "stddev_us")
    cosine = _float(row, "cosine", optional=True)
    parity, best = _flag(row, "correctness_pass"), _flag(row, "is_best")
    samples = _int(row, "samples", 1) if (row.get("samples") or "").strip() else None
    if samples is not None and samples > MAX_SAMPLES:
        raise ValueError(f"samples={samples} must be <= {MAX_SAMPLES}")
    if min_us is not None and mean_us is not None and min_us > mean_us * (1 + 1e-6) + 1e-3:
        raise ValueError(f"min_us={min_us} is above mean_us={mean_us}")
    if variant is None:
        return None
    if phase == "decode":
        kb, tw = _int(row, "kb"), _int(row, "target_waves")
        if get_codec("decode").parse_variant(variant) != (kb, tw):
            raise ValueError(f"variant {variant} disagrees with kb={kb} target_waves={tw}")
    assert min_us is not None and mean_us is not None and stddev_us is not None
    return ImportedRow(
        "", resolved, phase, fmt, codebook, shape or f"{n}x{k}", m, n, k, variant,
        min_us, mean_us, stddev_us, cosine, parity, best, samples,
    )  # fmt: skip


def display_name(name: str) -> str:
    """A file name safe to echo in messages (no control characters, no lone surrogates)."""
    escaped = name.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in escaped)


def parse_csv(
    name: str, text: str, arch: str | None = None
) -> tuple[list[ImportedRow], list[str], list[str]]:
    """Rows, skipped notes and problems of one file (never raises for bad rows)."""
    name = display_name(name)
    try:
        return _parse_csv(name, text, arch)
    except csv.Error as exc:  # e.g. NUL bytes
        return [], [], [f"{name}: not readable as CSV: {exc}"]


def _parse_csv(name: str, text: str, arch: str | None) -> tuple[list[ImportedRow], list[str], list[str]]:
    reader = csv.DictReader(io.StringIO(text))
    header = tuple(h.strip() for h in (reader.fieldnames or ()))
    if set(PREFILL_HEADER) <= set(header):
        schema = "prefill"
    elif set(DECODE_HEADER) <= set(header):
        schema = "decode"
    else:
        missing_p = [c for c in PREFILL_HEADER if c not in header]
        missing_d = [c for c in DECODE_HEADER if c not in header]
        missing = missing_p if len(missing_p) <= len(missing_d) else missing_d
        return (
            [],
            [],
            [f"{name}:1: header is neither the prefill nor the decode schema (missing {', '.join(missing)})"],
        )
    rows: list[ImportedRow] = []
    skipped: list[str] = []
    problems: list[str] = []
    for line, raw in enumerate(reader, start=2):
        where = f"{name}:{reader.line_num if reader.line_num else line}"
        clean = {(k or "").strip(): (v if isinstance(v, str) else "") for k, v in raw.items()}
        if None in raw:
            problems.append(f"{where}: more fields than the header")
            continue
        try:
            parsed = _parse_row(clean, schema, arch)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if parsed is None:
            skipped.append(f"{where}: AUTO variant (engine heuristic) not imported")
            continue
        rows.append(replace(parsed, source=where))
    if not rows and not problems and not skipped:
        problems.append(f"{name}: no data rows")
    return rows, skipped, problems


def parse_files(
    files: Sequence[tuple[str, str]],
    arch: str | None = None,
    samples: int = LLAMINAR_TRAINER_RUNS,
    repeats: Repeats = "error",
) -> ParseResult:
    """Parse every file and resolve repeated rows; raise CsvImportError listing every problem if any.

    ``samples``: timed runs behind a row without a ``samples`` column (Llaminar's trainers: 20).
    ``repeats``: "error" (pool repeats that agree within noise, refuse those that do not) or "min".
    """
    if not 1 <= samples <= MAX_SAMPLES:
        raise ValueError(f"samples must be in 1..{MAX_SAMPLES}, got {samples}")
    if repeats not in REPEATS:
        raise ValueError(f"repeats must be one of {', '.join(REPEATS)}, got {repeats!r}")
    rows: list[ImportedRow] = []
    skipped: list[str] = []
    problems: list[str] = []
    for name, text in files:
        r, s, p = parse_csv(name, text, arch)
        rows += [row if row.samples is not None else replace(row, samples=samples) for row in r]
        skipped += s
        problems += p
    merged, notes, conflicts = resolve_repeats(rows, repeats)
    problems += conflicts
    if problems:
        raise CsvImportError(problems)
    return ParseResult(tuple(merged), tuple(skipped), tuple(notes))


def _same_numbers(a: ImportedRow, b: ImportedRow) -> bool:
    return (a.min_us, a.mean_us, a.stddev_us, a.parity_pass, a.samples) == (
        b.min_us, b.mean_us, b.stddev_us, b.parity_pass, b.samples,
    )  # fmt: skip


def contradicts(a: ImportedRow, b: ImportedRow) -> bool:
    """Two runs of one variant at one point disagree beyond their noise (either is shown slower)."""
    lo, hi = sorted((a, b), key=lambda r: r.min_us)
    return ratio_interval(hi.stats(), lo.stats())[1][0] > 1.0 + REPEAT_TOLERANCE


def pool(rows: Sequence[ImportedRow]) -> ImportedRow:
    """One summary of all the runs of ``rows``: min of mins, run-weighted mean, pooled population stddev.

    A variant that failed parity in any run fails (it can never win)."""
    counts = [r.samples or LLAMINAR_TRAINER_RUNS for r in rows]
    total = sum(counts)
    mean = sum(r.mean_us * c for r, c in zip(rows, counts, strict=True)) / total
    second = sum((r.stddev_us**2 + r.mean_us**2) * c for r, c in zip(rows, counts, strict=True)) / total
    stddev = math.sqrt(max(0.0, second - mean * mean))
    first = min(rows, key=lambda r: r.min_us)
    cosines = [r.cosine for r in rows if r.cosine is not None]
    return replace(
        first,
        source="+".join(r.source for r in rows),
        min_us=first.min_us,
        mean_us=mean,
        stddev_us=stddev,
        cosine=min(cosines) if cosines else None,
        parity_pass=all(r.parity_pass for r in rows),
        is_best=any(r.is_best for r in rows),
        samples=total,
    )


def _describe(key: tuple[str, str, str, int, int, int, str]) -> str:
    arch, phase, fmt, m, n, k, variant = key
    return f"{variant} {fmt} M={m} {n}x{k} ({arch} {phase})"


def resolve_repeats(
    rows: Sequence[ImportedRow], repeats: Repeats = "error"
) -> tuple[list[ImportedRow], list[str], list[str]]:
    """One row per key: (rows, notes on what was pooled, counted once or dropped, conflicts)."""
    groups: dict[tuple[str, str, str, int, int, int, str], list[ImportedRow]] = defaultdict(list)
    for r in rows:
        groups[r.key].append(r)
    out: list[ImportedRow] = []
    notes: list[str] = []
    conflicts: list[str] = []
    for key, group in groups.items():
        distinct: list[ImportedRow] = []
        for r in group:
            twin = next((d for d in distinct if _same_numbers(d, r)), None)
            if twin is None:
                distinct.append(r)
            else:
                notes.append(f"{r.source}: identical to {twin.source} ({_describe(key)}); counted once")
        if len(distinct) == 1:
            out.append(distinct[0])
            continue
        lines = ", ".join(r.source for r in distinct)
        if repeats == "min":
            kept = min(distinct, key=lambda r: r.min_us)
            out.append(kept)
            notes.append(f"{lines}: {_describe(key)} measured {len(distinct)} times; kept the lowest "
                         f"min_us {kept.min_us:g} from {kept.source} (repeats=min)")  # fmt: skip
            continue
        clash = next(
            ((a, b) for i, a in enumerate(distinct) for b in distinct[i + 1 :] if contradicts(a, b)), None
        )
        if clash is not None:
            a, b = clash
            conflicts.append(
                f"{a.source}: {_describe(key)} has min_us {a.min_us:g} here but {b.min_us:g} at {b.source}, "
                "a gap beyond both rows' noise; remove one, or import with repeats=min "
                "(keep the lowest min_us, as Llaminar's analyzer does)"
            )
            continue
        pooled = pool(distinct)
        out.append(pooled)
        notes.append(f"{lines}: {_describe(key)} measured {len(distinct)} times, agreeing within noise; "
                     f"pooled into one summary of {pooled.samples} runs")  # fmt: skip
    return out, notes, conflicts


def _variant(session: Session, phase: str, name: str, cache: dict[tuple[str, str], Variant]) -> Variant:
    key = (phase, name)
    if key not in cache:
        found = session.scalar(
            select(Variant).where(Variant.family == BUILTIN_FOR_PHASE[phase], Variant.name == name)
        )
        if found is None:
            config = get_codec(phase).parse_variant(name)
            found = Variant(
                family=BUILTIN_FOR_PHASE[phase],
                name=name,
                params=dict(zip(get_codec(phase).config_fields, config, strict=True)),
            )
            session.add(found)
            session.flush()
        cache[key] = found
    return cache[key]


@dataclass(frozen=True)
class StoreResult:
    measurements: int
    points: int
    winners: int
    skipped: int


def store_rows(session: Session, result: ParseResult) -> StoreResult:
    """Add one measurement per row (parse_files already resolved repeats) and refresh winners.

    The caller owns the transaction: commit on success, roll back on any error.
    """
    from service.winners import refresh_point

    best: dict[tuple[str, str, str, int, int, int, str], ImportedRow] = {}
    for r in result.rows:
        if r.key in best:
            raise ValueError(f"{r.source}: repeated row reached store_rows; resolve repeats in parse_files")
        best[r.key] = r
    cache: dict[tuple[str, str], Variant] = {}
    for r in best.values():
        variant = _variant(session, r.phase, r.variant, cache)
        session.add(
            Measurement(
                variant_id=variant.id, arch=r.arch, phase=r.phase, format=r.format, codebook=r.codebook,
                shape=r.shape, n=r.n, k=r.k, m=r.m, source=SOURCE, n_dispatches=0,
                kernel=BUILTIN_FOR_PHASE[r.phase], summary_samples=r.samples or LLAMINAR_TRAINER_RUNS,
                median_us=r.min_us, min_us=r.min_us, mean_us=r.mean_us, stddev_us=r.stddev_us,
                cv=r.stddev_us / r.mean_us if r.mean_us else None, cosine=r.cosine, parity_pass=r.parity_pass,
            )
        )  # fmt: skip
    session.flush()
    points = sorted({(r.arch, r.phase, r.format, r.m, r.n, r.k) for r in best.values()})
    winners = sum(refresh_point(session, *p) is not None for p in points)
    return StoreResult(len(best), len(points), winners, len(result.skipped))
