"""Racing vs exhaustive, replayed on recorded per-dispatch data; prints (and optionally writes) JSON.

Data: a fresh host sweep in which every variant gets ``--max-dispatches`` interleaved dispatches
(the exhaustive budget; ``--save-recording`` keeps the raw times), a saved recording
(``--recording``), or the measurements of a Tunebase database (``--database-url``; every task
whose variants all have dispatch rows).

Replay: the racing policy (workers.harness.racing.RacingPolicy, the one workers use) is fed
the recorded dispatches in their recorded order, round by round, exactly as the interleave
scheduler would: each live variant's r-th recorded time in round r (``--rotations N`` also
replays from N-1 other circular start rounds). Its winner is chosen by the same rule as stored
winners (service.statistics.winners.choose_winner) on what it saw, the variants it dropped
being ``raced_out``. ``--baseline-policy-module`` replays another RacingPolicy beside it.

Truth: the exhaustive decision (choose_winner on all recorded dispatches). Two definitions,
both reported:

* old: a gap point has runner-up median / best median - 1 > ``--gap`` (no interval);
  agreement = the same winner;
* new: a gap point is one the exhaustive decision *decides* (its own bootstrap interval
  excludes ``1 + min_effect``) with margin > ``--gap``: same winner required. A point it
  leaves undecided is a tie (DESIGN §5.5: a tie group, broken toward the incumbent, then the
  simpler variant): agreement = the race winner is a member of the exhaustive tie group.
  The regret (all-dispatch median of the race winner over the best one) is reported beside.

    .venv/bin/python bench/racing_vs_exhaustive.py --m 1,2,3,4 --rotations 4 \
        --save-recording bench/results/racing-$(date +%F)-host-dispatches.json.gz \
        --out bench/results/racing-$(date +%F).json
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import importlib.util
import json
import os
import platform
import socket
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from service.statistics.bootstrap import stable_seed  # noqa: E402
from service.statistics.winners import Candidate, Decision, choose_winner  # noqa: E402
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
    from kernels.packages.loader import builtin_packages
    from workers.backends.base import TaskSpec
    from workers.backends.host import HostBackend, cpu_model

    backend = HostBackend(artifact_dir=Path(tempfile.mkdtemp(prefix="tb-bench-")))
    device = backend.detect()
    if device is None:
        raise SystemExit("no C compiler: cannot run the host backend")
    family = builtin_packages()["tb-decode"]
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


def save_recording(path: Path, points: Sequence[RecordedPoint], machine: Mapping[str, Any]) -> None:
    """Keep the raw per-dispatch times so the replay can be re-run without re-measuring."""
    payload = {
        "machine": dict(machine),
        "points": [
            {"key": p.key, "times_ns": p.times_ns, "eligible": sorted(p.eligible), "order": p.order}
            for p in points
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        json.dump(payload, fh, separators=(",", ":"))


def load_recording(path: Path) -> tuple[list[RecordedPoint], dict[str, Any]]:
    with gzip.open(path, "rt") as fh:
        payload = json.load(fh)
    points = [
        RecordedPoint(
            p["key"], {n: list(t) for n, t in p["times_ns"].items()}, set(p["eligible"]), p["order"]
        )
        for p in payload["points"]
    ]
    return points, {**payload["machine"], "recording": str(path)}


def decide(
    point: RecordedPoint, times: Mapping[str, Sequence[int]], seed: str, raced_out: Collection[str] = ()
) -> Decision | None:
    """The stored-winner rule (choose_winner, no incumbent) on the given dispatches."""
    candidates = [
        Candidate(
            name,
            float(np.median(t)) / 1000,
            name in point.eligible,
            i,
            point.order.get(name, 0),
            tuple(x / 1000 for x in t),
            raced_out=name in raced_out,
        )
        for i, (name, t) in enumerate(times.items())
        if len(t)
    ]
    return choose_winner(candidates, seed=seed)


@dataclass
class RaceRun:
    consumed: dict[str, list[int]]
    stop: str
    rounds: int
    survivors: list[str]
    dropped: list[str]


def load_policy(path: Path) -> Any:
    """``RacingPolicy`` from another file, e.g. ``git show <rev>:workers/harness/racing.py > old.py``."""
    spec = importlib.util.spec_from_file_location("racing_under_test", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module.RacingPolicy


def race(
    point: RecordedPoint,
    min_d: int,
    max_d: int,
    min_effect: float,
    offset: float = 0.0,
    policy_cls: Any = RacingPolicy,
) -> RaceRun:
    """Replay the racing policy on the recorded order, starting ``offset`` of the budget in (circularly)."""
    budget = min(max_d, min(len(t) for t in point.times_ns.values()))
    policy = policy_cls(min_d, budget, min_effect, frozenset(point.eligible), seed=stable_seed(point.key))
    seen: dict[str, list[Dispatch]] = {name: [] for name in point.times_ns}
    live = list(point.times_ns)
    seq = 0
    rounds = 0
    for r in range(budget):
        for name in live:
            seen[name].append(Dispatch(seq, point.times_ns[name][(r + int(offset * budget)) % budget], 0, 0))
            seq += 1
        rounds = r + 1
        keep = set(policy.after_round(r + 1, {name: seen[name] for name in live}))
        live = [name for name in live if name in keep]
        if not live:
            break
    consumed = {name: [d.device_ns for d in rows] for name, rows in seen.items()}
    return RaceRun(consumed, policy.stop_reason, rounds, list(policy.survivors), sorted(policy.dropped))


def classify(truth: Decision | None, gap: float) -> str:
    """New truth classes, from the exhaustive decision with its own interval (DESIGN §5.5)."""
    if truth is None:
        return "none"
    if not truth.decided:
        return "tie"
    return "decided_gap" if truth.margin is not None and truth.margin > gap else "decided_small_gap"


def agrees_new(truth: Decision | None, raced: Decision | None) -> bool:
    """Decision agreement: same winner where exhaustive decided; a member of its tie group where it tied."""
    if truth is None or raced is None:
        return truth is None and raced is None
    if truth.decided:
        return raced.winner.variant == truth.winner.variant
    return raced.winner.variant in truth.tie_group


def point_row(
    point: RecordedPoint, args: argparse.Namespace, offset: float = 0.0, policy_cls: Any = RacingPolicy
) -> dict[str, Any]:
    full = {n: t[: args.max_dispatches] for n, t in point.times_ns.items()}
    truth = decide(point, full, point.key)
    full_medians = {n: float(np.median(t)) for n, t in full.items() if n in point.eligible and len(t)}
    medians = sorted(full_medians.values())
    gap = medians[1] / medians[0] - 1 if len(medians) > 1 else None
    run = race(point, args.min_dispatches, args.max_dispatches, args.min_effect, offset, policy_cls)
    raced = decide(point, run.consumed, point.key, run.dropped)
    race_winner = raced.winner.variant if raced else None
    truth_winner = truth.winner.variant if truth else None
    regret = full_medians[race_winner] / medians[0] - 1 if race_winner in full_medians else None
    ex_regret = full_medians[truth_winner] / medians[0] - 1 if truth_winner in full_medians else None
    return {
        "point": point.key,
        "variants": len(full),
        "true_gap": gap,
        "exhaustive_winner": truth_winner,
        "exhaustive_decided": bool(truth and truth.decided),
        "exhaustive_margin": truth.margin if truth else None,
        "exhaustive_margin_ci": list(truth.margin_ci) if truth and truth.margin_ci else None,
        "exhaustive_tie_group": truth.tie_group if truth else [],
        "class_new": classify(truth, args.gap),
        "race_winner": race_winner,
        "race_decided": bool(raced and raced.decided),
        "race_tie_group": raced.tie_group if raced else [],
        "race_stop": run.stop,
        "race_rounds": run.rounds,
        "race_survivors": run.survivors,
        "agree_old": race_winner == truth_winner,
        "agree_new": agrees_new(truth, raced),
        "race_regret": regret,
        "exhaustive_regret": ex_regret,
        "exhaustive_dispatches": sum(len(t) for t in full.values()),
        "race_dispatches": sum(len(t) for t in run.consumed.values()),
        "exhaustive_device_s": sum(sum(t) for t in full.values()) / 1e9,
        "race_device_s": sum(sum(t) for t in run.consumed.values()) / 1e9,
    }


def _rate(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    return sum(bool(r[key]) for r in rows) / len(rows) if rows else None


def summarise(rows: Sequence[Mapping[str, Any]], gap: float) -> dict[str, Any]:
    ex_d = sum(r["exhaustive_dispatches"] for r in rows)
    ra_d = sum(r["race_dispatches"] for r in rows)
    ex_s = sum(r["exhaustive_device_s"] for r in rows)
    ra_s = sum(r["race_device_s"] for r in rows)
    old_gapped = [r for r in rows if r["true_gap"] is not None and r["true_gap"] > gap]
    by_class = {
        c: [r for r in rows if r["class_new"] == c] for c in ("decided_gap", "decided_small_gap", "tie")
    }
    regrets = sorted(r["race_regret"] for r in rows if r["race_regret"] is not None)
    ex_regrets = sorted(r["exhaustive_regret"] for r in rows if r["exhaustive_regret"] is not None)
    stops: dict[str, int] = defaultdict(int)
    for r in rows:
        stops[r["race_stop"]] += 1
    return {
        "exhaustive_dispatches": ex_d,
        "race_dispatches": ra_d,
        "dispatch_reduction": ex_d / ra_d if ra_d else None,
        "exhaustive_device_s": ex_s,
        "race_device_s": ra_s,
        "device_time_reduction": ex_s / ra_s if ra_s else None,
        "old_definition": {
            "definition": f"gap point: runner-up median / best median - 1 > {gap} over all dispatches "
            "(no interval); agreement: race winner == exhaustive winner",
            "points_gap_above": len(old_gapped),
            "agreement_gap_above": _rate(old_gapped, "agree_old"),
            "agreement_all_points": _rate(rows, "agree_old"),
        },
        "new_definition": {
            "definition": f"gap point: the exhaustive decision on all dispatches is decided (95% bootstrap "
            f"interval of runner-up/leader above 1 + min_effect) and its margin > {gap}; agreement there: "
            "same winner. Tie point: exhaustive undecided; agreement: the race winner is in the exhaustive "
            "tie group (DESIGN 5.5: tie groups are broken toward the incumbent, then the simpler variant, "
            "so any member is an acceptable decision). Decided points with margin <= gap: same winner.",
            "points_gap_above": len(by_class["decided_gap"]),
            "agreement_gap_above": _rate(by_class["decided_gap"], "agree_new"),
            "points_decided_small_gap": len(by_class["decided_small_gap"]),
            "agreement_decided_small_gap": _rate(by_class["decided_small_gap"], "agree_new"),
            "points_tie": len(by_class["tie"]),
            "agreement_tie_in_group": _rate(by_class["tie"], "agree_new"),
            "same_winner_on_tie_points": _rate(by_class["tie"], "agree_old"),
            "decision_agreement_all_points": _rate(rows, "agree_new"),
        },
        "regret": {
            "definition": "all-dispatch median of the race winner / best all-dispatch median - 1",
            "mean": float(np.mean(regrets)) if regrets else None,
            "p90": float(np.percentile(regrets, 90)) if regrets else None,
            "max": regrets[-1] if regrets else None,
            "points_above_gap": sum(x > gap for x in regrets),
            "exhaustive_mean": float(np.mean(ex_regrets)) if ex_regrets else None,
            "exhaustive_max": ex_regrets[-1] if ex_regrets else None,
            "note": "the exhaustive rule's own tie-breaks (simpler variant) also pick non-fastest medians",
        },
        "stop_reasons": dict(stops),
        "target": ">= 3x fewer dispatches at >= 98% agreement (gap > 2%)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default="", help="replay a Tunebase DB instead of a host sweep")
    parser.add_argument("--recording", type=Path, default=None, help="replay a saved recording (.json.gz)")
    parser.add_argument("--save-recording", type=Path, default=None, help="write the raw times (.json.gz)")
    parser.add_argument("--formats", default="Q8_0,Q4_0")
    parser.add_argument("--shapes", type=int, default=len(DEFAULT_SHAPES), help="how many bench shapes")
    parser.add_argument("--m", default="1,2")
    parser.add_argument("--min-dispatches", type=int, default=20)
    parser.add_argument("--max-dispatches", type=int, default=200)
    parser.add_argument("--min-effect", type=float, default=0.01)
    parser.add_argument(
        "--gap", type=float, default=0.02, help="agreement counted where the true gap exceeds this"
    )
    parser.add_argument(
        "--rotations", type=int, default=0, help="also replay from N evenly spaced circular start offsets"
    )
    parser.add_argument(
        "--baseline-policy-module",
        type=Path,
        default=None,
        help="also replay the RacingPolicy of this file (e.g. git show REV:workers/harness/racing.py > f.py)",
    )
    parser.add_argument(
        "--previous", type=Path, default=None, help="an earlier report whose summary is quoted for reference"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    started = time.time()
    if args.recording is not None:
        points, machine = load_recording(args.recording)
        source = f"recording {args.recording.name}"
    elif args.database_url:
        points, machine = record_db(args.database_url)
        source = "database"
    else:
        points, machine = record_host(args)
        source = "host sweep (recorded here)"
    record_s = time.time() - started
    if args.save_recording is not None:
        save_recording(args.save_recording, points, machine)

    started = time.time()
    policies: dict[str, tuple[Any, str]] = {"current": (RacingPolicy, "workers/harness/racing.py")}
    if args.baseline_policy_module is not None:
        policies["baseline"] = (load_policy(args.baseline_policy_module), str(args.baseline_policy_module))
    report: dict[str, Any] = {
        "bench": "racing_vs_exhaustive",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine,
        "source": source,
        "params": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k not in ("out", "database_url")
        },
        "record_seconds": round(record_s, 1),
        "points": len(points),
    }
    if args.previous is not None:
        previous = json.loads(args.previous.read_text())
        report["previous_report"] = {
            "file": str(args.previous),
            "date": previous.get("date"),
            "points": previous.get("points"),
            "summary": previous.get("summary"),
            "note": "other recorded data (it kept no per-dispatch times, so it cannot be replayed); "
            "old truth definition",
        }
    all_rows: dict[str, list[dict[str, Any]]] = {}
    for label, (policy_cls, module) in policies.items():
        rows = [point_row(point, args, 0, policy_cls) for point in points]
        all_rows[label] = rows
        block: dict[str, Any] = {
            "policy": policy_description(policy_cls, module, args),
            "summary": summarise(rows, args.gap),
        }
        if args.rotations > 0:
            offsets = [i / args.rotations for i in range(1, args.rotations)]
            rotated = [point_row(point, args, offset, policy_cls) for offset in offsets for point in points]
            block["rotated_replays"] = {
                "why": "the same recordings replayed from other circular start rounds: more race trials "
                "against the same truth, so one lucky order cannot carry the result",
                "start_offsets_fraction_of_budget": offsets,
                "summary": summarise(rotated, args.gap),
            }
        report[label] = block
    report["replay_seconds"] = round(time.time() - started, 1)
    report["rows"] = all_rows["current"]
    if "baseline" in all_rows:
        report["baseline_rows"] = all_rows["baseline"]
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


def policy_description(policy_cls: Any, module: str, args: argparse.Namespace) -> dict[str, Any]:
    probe = policy_cls(args.min_dispatches, args.max_dispatches, args.min_effect)
    fields = ("looks", "z", "check_every", "confidence", "equivalence", "look_growth", "resamples")
    described = {name: getattr(probe, name) for name in fields if hasattr(probe, name)}
    described["module"] = module
    described["note"] = (
        "looks shown for --max-dispatches; each point's race plans its own looks up to its budget, "
        "min(--max-dispatches, dispatches recorded per variant)"
    )
    return {k: list(v) if isinstance(v, tuple) else v for k, v in described.items()}


if __name__ == "__main__":
    main()
