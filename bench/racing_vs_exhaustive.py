"""Racing vs exhaustive, replayed on recorded per-dispatch data; prints (and optionally writes) JSON.

Data: either a fresh host sweep in which every variant gets ``--max-dispatches`` interleaved
dispatches (the exhaustive budget), or the measurements of a Tunebase database
(``--database-url``; every task whose variants all have dispatch rows).

Replay: the racing policy (workers.harness.racing.RacingPolicy, the one workers use) is fed
the recorded dispatches in their recorded order, round by round, exactly as the interleave
scheduler would: each live variant's r-th recorded time in round r. Its winner is chosen by
the same rule as stored winners (service.statistics.winners.choose_winner) on what it saw.

Truth: the exhaustive decision on all recorded dispatches. Agreement is counted on points
whose true gap (runner-up median / best median - 1, over all dispatches) exceeds ``--gap``.

    .venv/bin/python bench/racing_vs_exhaustive.py --out bench/results/racing-$(date +%F).json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from service.statistics.bootstrap import stable_seed  # noqa: E402
from service.statistics.winners import Candidate, choose_winner  # noqa: E402
from workers.backends.base import Dispatch  # noqa: E402
from workers.harness.racing import RacingPolicy  # noqa: E402

DEFAULT_SHAPES = ((1024, 1024), (2048, 1024), (1024, 2048), (4096, 1024), (2048, 2048), (512, 4096))


@dataclass
class RecordedPoint:
    key: str
    times_ns: dict[str, list[int]]  # per variant, in recorded (interleaved) order
    eligible: set[str]
    order: dict[str, int]


def record_host(args: argparse.Namespace) -> tuple[list[RecordedPoint], dict[str, Any]]:
    from kernels.families.decode import DecodeFamily
    from workers.backends.base import TaskSpec
    from workers.backends.host import HostBackend, cpu_model

    backend = HostBackend(artifact_dir=Path(tempfile.mkdtemp(prefix="tb-bench-")))
    device = backend.detect()
    if device is None:
        raise SystemExit("no C compiler: cannot run the host backend")
    family = DecodeFamily()
    variants = tuple(v.name for v in family.space("host"))
    order = {v.name: v.order for v in family.space("host")}
    points: list[RecordedPoint] = []
    for format_name in args.formats.split(","):
        for n, k in DEFAULT_SHAPES[: args.shapes]:
            for m in (int(x) for x in args.m.split(",")):
                spec = TaskSpec(
                    "host",
                    "decode",
                    format_name,
                    f"B{n}x{k}",
                    n,
                    k,
                    m,
                    variants,
                    min_dispatches=args.max_dispatches,
                    max_dispatches=args.max_dispatches,
                    warmup=3,
                    seed=0,
                    strategy="exhaustive",
                )
                result = backend.run_task(spec)
                times = {r.variant: [d.device_ns for d in r.dispatches] for r in result.results}
                eligible = {r.variant for r in result.results if r.parity and r.parity.passed and not r.error}
                points.append(
                    RecordedPoint(f"host/decode/{format_name}/m{m}/{n}x{k}", times, eligible, order)
                )
                print(f"recorded {points[-1].key}", file=sys.stderr)
    machine = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "toolchain": device.runtime_version,
        "kernel": platform.release(),
        "hostname": socket.gethostname(),
    }
    return points, machine


def record_db(url: str) -> tuple[list[RecordedPoint], dict[str, Any]]:
    from sqlalchemy import select

    from service.db.models import Device, Measurement, Variant
    from service.db.models import Dispatch as DispatchRow
    from service.db.session import session_scope

    points: list[RecordedPoint] = []
    devices: set[str] = set()
    with session_scope(url) as session:
        rows = session.execute(
            select(Measurement, Variant, Device)
            .join(Variant, Measurement.variant_id == Variant.id)
            .outerjoin(Device, Measurement.device_id == Device.id)
            .where(Measurement.task_id.is_not(None))
            .order_by(Measurement.task_id)
        ).all()
        by_task: dict[int, list[tuple[Measurement, Variant]]] = defaultdict(list)
        for measurement, variant, device in rows:
            assert measurement.task_id is not None
            by_task[measurement.task_id].append((measurement, variant))
            if device is not None:
                devices.add(f"{device.arch} {device.name} ({device.compute_units} CU)")
        for task_id, items in by_task.items():
            times: dict[str, list[int]] = {}
            for measurement, variant in items:
                times[variant.name] = list(
                    session.scalars(
                        select(DispatchRow.device_ns)
                        .where(DispatchRow.measurement_id == measurement.id)
                        .order_by(DispatchRow.seq)
                    )
                )
            if len(times) < 2 or any(len(t) < 3 for t in times.values()):
                continue
            m0 = items[0][0]
            points.append(
                RecordedPoint(
                    f"{m0.arch}/{m0.phase}/{m0.format}/m{m0.m}/{m0.n}x{m0.k}/task{task_id}",
                    times,
                    {v.name for m, v in items if m.parity_pass},
                    {v.name: v.declared_order for _, v in items},
                )
            )
    return points, {"devices": sorted(devices), "database": url.split("@")[-1]}


def decide(point: RecordedPoint, times: Mapping[str, Sequence[int]], seed: str) -> tuple[str | None, bool]:
    candidates = [
        Candidate(
            name,
            float(np.median(t)) / 1000,
            name in point.eligible,
            i,
            point.order.get(name, 0),
            tuple(x / 1000 for x in t),
        )
        for i, (name, t) in enumerate(times.items())
        if len(t)
    ]
    decision = choose_winner(candidates, seed=seed)
    return (decision.winner.variant, decision.decided) if decision else (None, False)


def race(point: RecordedPoint, min_d: int, max_d: int, min_effect: float) -> tuple[dict[str, list[int]], str]:
    """Replay the racing policy on the recorded order; returns what it consumed."""
    budget = min(max_d, min(len(t) for t in point.times_ns.values()))
    policy = RacingPolicy(min_d, budget, min_effect, frozenset(point.eligible), seed=stable_seed(point.key))
    seen: dict[str, list[Dispatch]] = {name: [] for name in point.times_ns}
    live = list(point.times_ns)
    seq = 0
    for r in range(budget):
        for name in live:
            seen[name].append(Dispatch(seq, point.times_ns[name][r], 0, 0))
            seq += 1
        keep = set(policy.after_round(r + 1, {name: seen[name] for name in live}))
        live = [name for name in live if name in keep]
        if not live:
            break
    return {name: [d.device_ns for d in rows] for name, rows in seen.items()}, policy.stop_reason


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default="", help="replay a Tunebase DB instead of a host sweep")
    parser.add_argument("--formats", default="Q8_0,Q4_0")
    parser.add_argument("--shapes", type=int, default=len(DEFAULT_SHAPES), help="how many bench shapes")
    parser.add_argument("--m", default="1,2")
    parser.add_argument("--min-dispatches", type=int, default=20)
    parser.add_argument("--max-dispatches", type=int, default=200)
    parser.add_argument("--min-effect", type=float, default=0.01)
    parser.add_argument(
        "--gap", type=float, default=0.02, help="agreement counted where the true gap exceeds this"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    started = time.time()
    if args.database_url:
        points, machine = record_db(args.database_url)
    else:
        points, machine = record_host(args)
    record_s = time.time() - started

    rows: list[dict[str, Any]] = []
    for point in points:
        full = {n: t[: args.max_dispatches] for n, t in point.times_ns.items()}
        truth, truth_decided = decide(point, full, point.key)
        medians = sorted(float(np.median(t)) for n, t in full.items() if n in point.eligible)
        gap = medians[1] / medians[0] - 1 if len(medians) > 1 else None
        consumed, stop = race(point, args.min_dispatches, args.max_dispatches, args.min_effect)
        raced, raced_decided = decide(point, consumed, point.key)
        rows.append(
            {
                "point": point.key,
                "variants": len(full),
                "true_gap": gap,
                "exhaustive_winner": truth,
                "exhaustive_decided": truth_decided,
                "race_winner": raced,
                "race_decided": raced_decided,
                "race_stop": stop,
                "exhaustive_dispatches": sum(len(t) for t in full.values()),
                "race_dispatches": sum(len(t) for t in consumed.values()),
                "exhaustive_device_s": sum(sum(t) for t in full.values()) / 1e9,
                "race_device_s": sum(sum(t) for t in consumed.values()) / 1e9,
            }
        )
    gapped = [r for r in rows if r["true_gap"] is not None and r["true_gap"] > args.gap]
    ex_d = sum(r["exhaustive_dispatches"] for r in rows)
    ra_d = sum(r["race_dispatches"] for r in rows)
    ex_s = sum(r["exhaustive_device_s"] for r in rows)
    ra_s = sum(r["race_device_s"] for r in rows)
    report = {
        "bench": "racing_vs_exhaustive",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine,
        "source": "database" if args.database_url else "host sweep (recorded here)",
        "params": {k: v for k, v in vars(args).items() if k not in ("out", "database_url")},
        "record_seconds": round(record_s, 1),
        "points": len(rows),
        "points_gap_above": len(gapped),
        "summary": {
            "exhaustive_dispatches": ex_d,
            "race_dispatches": ra_d,
            "dispatch_reduction": ex_d / ra_d if ra_d else None,
            "exhaustive_device_s": ex_s,
            "race_device_s": ra_s,
            "device_time_reduction": ex_s / ra_s if ra_s else None,
            "agreement_gap_above": (
                sum(r["race_winner"] == r["exhaustive_winner"] for r in gapped) / len(gapped)
                if gapped
                else None
            ),
            "agreement_all_points": sum(r["race_winner"] == r["exhaustive_winner"] for r in rows) / len(rows)
            if rows
            else None,
            "target": ">= 3x fewer dispatches at >= 98% agreement (gap > 2%)",
        },
        "rows": rows,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
