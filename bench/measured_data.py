"""Measured per-dispatch data for the table benches, from whatever a device run left behind.

Accepted inputs (each keeps every variant's every timed dispatch, which regret needs):

* a Tunebase database file (``.sqlite3``, or ``.sqlite3.gz`` as committed under bench/results/):
  copied, migrated to the current schema, its winners recomputed with the current rules;
* a recording (``.json.gz``) written by ``bench/racing_vs_exhaustive.py --save-recording`` or
  ``bench/racing_gpu.py record`` (points keyed ``arch/phase/format/m{m}/{n}x{k}``): loaded into a
  fresh database.

Either way the benches then run the service's own code (winners, alias collapse, table
generation) on a real database, and ``provenance`` says what the data is and where it came from.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import re
import shutil
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernels.arches import get_arch
from kernels.formats.registry import FORMATS
from kernels.packages.loader import BUILTIN_FOR_PHASE, builtin_packages
from service.db.migrate import upgrade
from service.db.models import Device, Dispatch, Measurement, Variant, Winner
from service.db.session import session_scope
from service.statistics.summary import summarize_ns
from service.winners import refresh_point

_KEY = re.compile(
    r"^(?P<arch>[^/]+)/(?P<phase>decode|prefill)/(?P<format>[^/]+)/m(?P<m>\d+)/(?P<n>\d+)x(?P<k>\d+)"
)
PointKey = tuple[str, str, str, int, int, int]  # arch, phase, format, m, n, k


class DataError(ValueError):
    """The input is not usable measured data (the benches exit 2 with the message)."""


@dataclass
class RecordedPoint:
    """Every variant's dispatch times (ns, recorded order) at one (arch, phase, format, M, N, K)."""

    arch: str
    phase: str
    format: str
    m: int
    n: int
    k: int
    shape: str
    times_ns: dict[str, list[int]]
    eligible: set[str]  # passed parity
    cosine: dict[str, float] = field(default_factory=dict)
    order: dict[str, int] = field(default_factory=dict)  # declared order of the variants when recorded

    @property
    def key(self) -> PointKey:
        return (self.arch, self.phase, self.format, self.m, self.n, self.k)


def _open_copy(path: Path, workdir: Path) -> Path:
    target = workdir / "measured.sqlite3"
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    else:
        shutil.copyfile(path, target)
    return target


def is_database(path: Path) -> bool:
    return path.name.endswith((".sqlite3", ".sqlite3.gz", ".sqlite", ".db"))


def load_recording(path: Path) -> tuple[list[RecordedPoint], dict[str, Any]]:
    """Points of a racing-bench recording (``.json.gz``)."""
    try:
        with gzip.open(path, "rt") as fh:
            payload = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a gzip'd JSON recording ({exc})") from None
    points: list[RecordedPoint] = []
    for item in payload.get("points", []):
        match = _KEY.match(str(item.get("key", "")))
        if match is None:
            raise DataError(f"{path}: point key {item.get('key')!r} is not arch/phase/format/m<M>/<N>x<K>")
        n, k = int(match["n"]), int(match["k"])
        points.append(
            RecordedPoint(
                match["arch"], match["phase"], match["format"], int(match["m"]), n, k,
                str(item.get("shape") or f"{n}x{k}"),
                {name: [int(t) for t in times] for name, times in item["times_ns"].items()},
                set(item.get("eligible", [])),
                order={str(k): int(v) for k, v in item.get("order", {}).items()},
            )
        )  # fmt: skip
    return points, {"kind": "recording", "file": str(path), "machine": payload.get("machine", {})}


def points_of_database(session: Session) -> list[RecordedPoint]:
    """Every task's variants with their dispatch rows (measurements without rows are left out)."""
    rows = session.execute(
        select(Measurement, Variant)
        .join(Variant, Measurement.variant_id == Variant.id)
        .order_by(Measurement.id)
    ).all()
    by_point: dict[PointKey, RecordedPoint] = {}
    ids: dict[int, tuple[PointKey, str]] = {}
    for measurement, variant in rows:
        if measurement.n_dispatches == 0:
            continue
        key = (
            measurement.arch,
            measurement.phase,
            measurement.format,
            measurement.m,
            measurement.n,
            measurement.k,
        )
        point = by_point.setdefault(key, RecordedPoint(*key[:3], *key[3:], measurement.shape, {}, set()))
        ids[measurement.id] = (key, variant.name)
        point.times_ns[variant.name] = []
        if measurement.parity_pass:
            point.eligible.add(variant.name)
        if measurement.cosine is not None:
            point.cosine[variant.name] = measurement.cosine
        point.order[variant.name] = variant.declared_order
    for measurement_id, device_ns in session.execute(
        select(Dispatch.measurement_id, Dispatch.device_ns).order_by(Dispatch.measurement_id, Dispatch.seq)
    ):
        if measurement_id in ids:
            key, name = ids[measurement_id]
            by_point[key].times_ns[name].append(int(device_ns))
    return list(by_point.values())


def devices_of(session: Session) -> list[str]:
    return [
        f"{d.arch} {d.name} ({d.compute_units} units; {d.driver_version}; {d.runtime_version})"
        for d in session.scalars(select(Device).order_by(Device.id))
    ]


def store_points(session: Session, points: list[RecordedPoint], device_name: str) -> None:
    """Write recorded points as sweep-like measurements with dispatch rows (a fresh database)."""
    variants: dict[tuple[str, str], Variant] = {}
    devices: dict[str, Device] = {}
    for p in points:
        backend = get_arch(p.arch).backend
        package = builtin_packages()[BUILTIN_FOR_PHASE[p.phase]]
        if p.arch not in devices:
            devices[p.arch] = Device(
                backend=backend, arch=p.arch, name=device_name, compute_units=get_arch(p.arch).cus,
                uuid=f"recording-{p.arch}", driver_version="recorded", runtime_version="recorded",
            )  # fmt: skip
            session.add(devices[p.arch])
            session.flush()
        current = {v.name: v for v in package.space(backend)}
        for name, times in p.times_ns.items():
            if not times:  # not run here (a restriction, a compile or launch error): nothing to store
                continue
            if (p.phase, name) not in variants:
                # a recording of an older variant space keeps its names (tables of it use a dialect that
                # reads them, e.g. Llaminar's KB/TW); its declared order is the recorded one
                parsed = current.get(name)
                variants[(p.phase, name)] = Variant(
                    family=package.name, name=name, params=dict(parsed.params) if parsed else {},
                    declared_order=parsed.order if parsed else p.order.get(name, 1 << 20),
                )  # fmt: skip
                session.add(variants[(p.phase, name)])
                session.flush()
            summary = summarize_ns(times)
            if summary is None:
                raise DataError(f"{p.key} {name}: no dispatches")
            row = Measurement(
                variant_id=variants[(p.phase, name)].id, device_id=devices[p.arch].id, arch=p.arch,
                phase=p.phase, format=p.format, codebook=FORMATS[p.format].codebook, shape=p.shape,
                n=p.n, k=p.k, m=p.m, source="sweep", kernel=package.name, source_hash="recorded",
                toolchain="recorded", n_dispatches=summary.n, median_us=summary.median_us,
                min_us=summary.min_us, p10_us=summary.p10_us, p90_us=summary.p90_us, mean_us=summary.mean_us,
                stddev_us=summary.stddev_us, cv=summary.cv, parity_pass=name in p.eligible,
                cosine=p.cosine.get(name),
            )  # fmt: skip
            session.add(row)
            session.flush()
            # the DB-API's executemany: millions of rows in seconds (the ORM's bulk insert takes minutes)
            session.connection().exec_driver_sql(
                "INSERT INTO dispatches (measurement_id, seq, device_ns, buffer_index) VALUES (?, ?, ?, 0)",
                [(row.id, i, t) for i, t in enumerate(times)],
            )


WinnerKey = tuple[str, str, str, int, int, int, str]


def _refresh(url: str, keys: list[WinnerKey]) -> int:
    """One worker process: refresh its points, a transaction each (SQLite WAL serialises the writes)."""
    done = 0
    for arch, phase, fmt, m, n, k, kernel in keys:
        with session_scope(url) as session:
            done += refresh_point(session, arch, phase, fmt, m, n, k, kernel=kernel or None) is not None
    return done


def refresh_all_winners(url: str, jobs: int | None = None) -> int:
    """Recompute every point's winner with the current rules (a recorded database holds old ones).

    The bootstrap of every variant dominates, so points are spread over ``jobs`` processes (default:
    the CPUs); each runs the service's own refresh_point."""
    with session_scope(url) as session:
        session.query(Winner).delete()
        keys = [
            (a, ph, f, m, n, k, kern)
            for a, ph, f, m, n, k, kern in session.execute(
                select(
                    Measurement.arch, Measurement.phase, Measurement.format, Measurement.m, Measurement.n,
                    Measurement.k, Measurement.kernel,
                ).distinct()
            )
        ]  # fmt: skip
    workers = max(1, min(jobs or os.cpu_count() or 1, len(keys) // 8 or 1))
    if workers == 1:
        return _refresh(url, keys)
    shares = [keys[i::workers] for i in range(workers)]
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return sum(pool.map(_refresh, [url] * workers, shares))


def open_measured(path: Path, workdir: Path) -> tuple[str, list[RecordedPoint], dict[str, Any]]:
    """A migrated database URL holding the data at ``path``, its points and where they came from."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if is_database(path):
        db = _open_copy(path, workdir)
        url = f"sqlite:///{db}"
        upgrade(url)
        with session_scope(url) as session:
            points = points_of_database(session)
            devices = devices_of(session)
        refresh_all_winners(url)
        provenance: dict[str, Any] = {"kind": "tunebase database", "file": str(path), "devices": devices}
    else:
        points, provenance = load_recording(path)
        url = f"sqlite:///{workdir / 'measured.sqlite3'}"
        upgrade(url)
        machine = provenance.get("machine", {})
        with session_scope(url) as session:
            store_points(session, points, str(machine.get("devices") or machine.get("cpu") or "recorded"))
        refresh_all_winners(url)
    if not points:
        raise DataError(f"{path}: no measurements with per-dispatch times")
    per_variant = [len(t) for p in points for t in p.times_ns.values()]
    provenance |= {
        "points": len(points),
        "shapes": len({(p.n, p.k) for p in points}),
        "formats": sorted({p.format for p in points}),
        "arches": sorted({p.arch for p in points}),
        "m": sorted({p.m for p in points}),
        "dispatches_per_variant": {"min": min(per_variant), "max": max(per_variant)},
    }
    return url, points, provenance


def current_names(points: list[RecordedPoint], phase: str = "decode") -> tuple[set[str], set[str]]:
    """(variants of the built-in package's current space, recorded variants outside it)."""
    backend_of = {p.arch: get_arch(p.arch).backend for p in points}
    package = builtin_packages()[BUILTIN_FOR_PHASE[phase]]
    space = {v.name for b in set(backend_of.values()) for v in package.space(b)}
    recorded = {v for p in points if p.phase == phase for v in p.times_ns}
    return recorded & space, recorded - space


def group_by_arch(points: list[RecordedPoint]) -> dict[tuple[str, str], list[RecordedPoint]]:
    out: dict[tuple[str, str], list[RecordedPoint]] = defaultdict(list)
    for p in points:
        out[(p.arch, p.phase)].append(p)
    return dict(out)
