"""Table regret on measured GPU data: leave-one-shape-out generalisation and in-sample against the trainer.

Data (``--data``, see bench/measured_data.py): a Tunebase database or a per-dispatch recording from a
GPU run; the JSON names the file, the devices and what it holds. Host (CPU) data is refused unless
``--allow-host``, and is then labelled so; nothing here is synthetic.

1. Generalisation, leave one shape out: for every (N, K) shape, the fallback is fitted on all other
   shapes and answers the held-out shape's points (every codebook and M), for each policy: work-size
   segments only, decision tree only, the surrogate only (per-variant time model -> synthetic grid ->
   tree, service/tables/surrogate.py; its emitted tree answers, and beside it the model's own argmin),
   the neighbours (every variant's regret interpolated between the measured shapes, valid-only
   answers, service/tables/neighbours.py; its emitted tree, and beside it its argmin),
   and the per-codebook choice the generator makes (by its own inner held-out regret, so nothing is
   tuned on the held-out shape); a modal-winner baseline beside. Per policy also per codebook.
   regret = worst-alias time(answer) / time(best achievable) - 1 from the measured medians; a variant
   not measured (or failing parity) at the held-out point costs 100%; a point the policy cannot answer
   is "uncovered" and reported both left out and charged 100%. Targets: mean <= 1%, p95 <= 3%.
   Beside each figure, the regret beyond the recording's own noise: per point the lower end of the
   95% bootstrap interval of median(answer) / median(best) - 1 over the dispatches, floored at 0.
   Where the data's variant names are the current package's, its restrictions say which variants can
   run at a held-out point (a function of M, N, K alone; no measurement enters).
   Per held-out shape one service.tables.policy.Fits of the other shapes is shared by every policy
   (each component fit and inner held-out score made once), and nothing of the held-out shape enters
   it (tests/tables/test_table_regret_loso.py). ``--held-out-shapes NxK,...`` holds out only those
   (a quick look; the JSON says subset and claims no target).
2. The final table (all data, the generator's own path, compiled and replayed): in-sample metrics and
   each codebook's fallback policy.
3. A Llaminar decode trainer CSV written from the same recording (bench/trainer_csv.py: the trainer's
   statistics over 20 runs, its is_best rule, AUTO rows), imported as a user would, its table generated;
   per codebook key the table's regret and the trainer's own choice's (Llaminar's analyzer: the lowest
   min_us over the codebook's rows), both worst-alias min_us over the best achievable choice.
   Targets: max <= 2%, mean <= 0.5%, never worse than the trainer's choice by more than the overlay
   threshold.

Usage: python bench/table_regret.py --data bench/results/<recording>.json.gz \
           --output bench/results/table-regret-DATE.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# One BLAS thread: the surrogate solves thousands of ~100x100 systems; threads only contend on them.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from measured_data import DataError, RecordedPoint, current_names, group_by_arch, open_measured  # noqa: E402
from trainer_csv import trainer_rows, write_csv  # noqa: E402

from kernels.arches import get_arch  # noqa: E402
from service.db.migrate import upgrade  # noqa: E402
from service.db.session import session_scope  # noqa: E402
from service.imports.llaminar_csv import parse_files, store_rows  # noqa: E402
from service.tables.blas import single_blas_thread  # noqa: E402
from service.tables.codecs import get_codec  # noqa: E402
from service.tables.collapse import collapse_aliases  # noqa: E402
from service.tables.fallback import aspect_class, pick_rule  # noqa: E402
from service.tables.metrics import percentile  # noqa: E402
from service.tables.model import MeasuredPoint  # noqa: E402
from service.tables.neighbours import neighbours_answer  # noqa: E402
from service.tables.policy import Fallback, Fits, fit_policy  # noqa: E402
from service.tables.surrogate import (  # noqa: E402
    Geometry,
    candidate_variants,
    geometry_for,
    model_answer,
)
from service.tables.validity import Validity, always_valid, validity_for  # noqa: E402
from service.tables.versions import alias_points, build_table  # noqa: E402

MEAN_TARGET, P95_TARGET = 0.01, 0.03
IN_SAMPLE_MAX, IN_SAMPLE_MEAN = 0.02, 0.005
UNMEASURED = 1.0
Answerer = Callable[[Fits], Callable[[MeasuredPoint], str | None]]


def regret(p: MeasuredPoint, variant: str) -> float:
    assert p.times_us is not None
    t = p.times_us.get(variant)
    return UNMEASURED if t is None else t / min(p.times_us.values()) - 1.0


def summary(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p95": None, "max": None}
    return {"mean": statistics.fmean(values), "p95": percentile(values, 95.0), "max": max(values)}


def fallback_answer(fit: Fallback) -> Callable[[MeasuredPoint], str | None]:
    return lambda p: fit.answer(p.codebook, p.m, p.n, p.k)


def modal_answer(fits: Fits) -> Callable[[MeasuredPoint], str | None]:
    """The segments fitted on regret, each re-labelled with its most frequent training winner."""
    train = fits.points
    rules = fit_policy(train, ("segments",), fits.geometry, fits).rules

    def answer(p: MeasuredPoint) -> str | None:
        group = rules.get((p.codebook, p.m, aspect_class(p.n, p.k)))
        if not group:
            return None
        rule = pick_rule(group, p.work_items)
        members = [
            q for q in train if (q.codebook, q.m, aspect_class(q.n, q.k)) == (p.codebook, p.m, rule.aspect)
        ]
        wins = Counter(q.winner for q in members if pick_rule(group, q.work_items) is rule)
        return min(wins, key=lambda v: (-wins[v], v)) if wins else rule.variant

    return answer


# Each policy answers from one Fits of the training shapes (service.tables.policy.Fits): the
# component fits (segments, per-codebook trees, surrogate trees, time models) and the inner held-out
# scores are made once per held-out shape and shared, not refitted per policy.
POLICIES: dict[str, Answerer] = {
    "segments": lambda f: fallback_answer(fit_policy(f.points, ("segments",), f.geometry, f)),
    "tree": lambda f: fallback_answer(fit_policy(f.points, ("tree",), f.geometry, f)),
    "surrogate": lambda f: fallback_answer(fit_policy(f.points, ("surrogate",), f.geometry, f)),
    "surrogate_model_argmin_not_emitted": lambda f: model_answer(
        f.models, candidate_variants(f.points, f.validity), f.validity
    ),
    "neighbours": lambda f: fallback_answer(fit_policy(f.points, ("neighbours",), f.geometry, f)),
    "neighbours_argmin_not_emitted": lambda f: neighbours_answer(f.neighbours),
    "chosen": lambda f: fallback_answer(fit_policy(f.points, geometry=f.geometry, fits=f)),
    "modal_winner_baseline": modal_answer,
}


HeldOut = tuple[tuple[int, int], str, MeasuredPoint, str | None]


def held_out_answers(
    points: Sequence[MeasuredPoint],
    geometry: Geometry | None = None,
    policies: Mapping[str, Answerer] = POLICIES,
    shapes: Sequence[tuple[int, int]] | None = None,
    validity: Validity = always_valid,
    jobs: int = 1,
) -> Iterator[HeldOut]:
    """(held-out shape, policy, point, answer) for every point of every held-out shape (``shapes``:
    those only, else all), each answered by a policy fitted on the other shapes' points alone: the
    Fits below is built from ``train``, and nothing else measured enters (``geometry`` holds the
    arch's constants only). tests/tables/test_table_regret_loso.py checks that changing a held-out
    shape's times never changes its answers. ``validity``: the package's restrictions (a function of
    the point's M, N, K alone, never of a measurement). ``jobs`` > 1: that many worker processes, each
    fitting one held-out shape at a time (the same answers, in the same order; POLICIES' entries only)."""
    all_shapes = sorted({(p.n, p.k) for p in points}, key=lambda s: (s[0] * s[1], s))
    wanted = all_shapes if shapes is None else list(shapes)
    if jobs <= 1 or len(wanted) < 2:
        for shape in wanted:
            yield from _one_shape(points, geometry, policies, validity, shape)
        return
    # worker processes fitting one held-out shape at a time (the fits are pure functions of the training
    # points, so the answers are those of one process); results come back in shape order. Workers start from
    # a fresh forkserver, never a fork of this process: a forked child inherits this process's sockets and
    # after-fork hooks (a Celery app's, in a test run) and once sat forever in a read of an inherited Redis
    # connection. So the inputs are pickled, and the policies go by name.
    foreign = sorted(name for name, fit in policies.items() if POLICIES.get(name) is not fit)
    if foreign:
        raise ValueError(f"jobs > 1 runs policies of POLICIES only (workers look them up by name): {foreign}")
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("forkserver")
    inputs = (list(points), geometry, tuple(policies), validity)
    with ProcessPoolExecutor(jobs, context, initializer=_start_worker, initargs=inputs) as pool:
        for shape, rows in zip(wanted, pool.map(_worker_shape, wanted), strict=True):
            held = [p for p in points if (p.n, p.k) == shape]
            for _, name, index, variant in rows:
                yield shape, name, held[index], variant


_WORKER: tuple[Any, ...] | None = None  # held_out_answers' inputs in a worker process


def _start_worker(
    points: list[MeasuredPoint], geometry: Geometry | None, policies: tuple[str, ...], validity: Validity
) -> None:
    global _WORKER
    _WORKER = (points, geometry, {name: POLICIES[name] for name in policies}, validity)


def _worker_shape(shape: tuple[int, int]) -> list[tuple[tuple[int, int], str, int, str | None]]:
    """One held-out shape's answers in a worker, points named by index (they pickle back cheaply)."""
    assert _WORKER is not None
    points, geometry, policies, validity = _WORKER
    index = {id(p): i for i, p in enumerate(p for p in points if (p.n, p.k) == shape)}
    return [
        (s, name, index[id(p)], v)
        for s, name, p, v in _one_shape(points, geometry, policies, validity, shape)
    ]


def _one_shape(
    points: Sequence[MeasuredPoint],
    geometry: Geometry | None,
    policies: Mapping[str, Answerer],
    validity: Validity,
    shape: tuple[int, int],
) -> Iterator[HeldOut]:
    n, k = shape
    train = [p for p in points if (p.n, p.k) != (n, k)]
    held = [p for p in points if (p.n, p.k) == (n, k)]
    fits = Fits(train, geometry, validity)  # from the training shapes only; the held-out one never enters
    for name, fit in policies.items():
        with single_blas_thread():
            answer = fit(fits)
            answers = [answer(p) for p in held]
        for p, variant in zip(held, answers, strict=True):
            yield (n, k), name, p, variant


NOISE_BOOTSTRAP = 400  # resamples of each variant's dispatches for the ratio-of-medians interval
Dispatches = Mapping[tuple[int, int, int, int], Mapping[str, Sequence[int]]]  # point key -> variant -> ns


def dispatches_of(points: Sequence[RecordedPoint]) -> dict[tuple[int, int, int, int], dict[str, list[int]]]:
    """Per codebook key with one recorded format (aliases: no single dispatch series), every eligible
    variant's dispatch times."""
    from kernels.formats.registry import FORMATS

    keyed: dict[tuple[int, int, int, int], list[RecordedPoint]] = defaultdict(list)
    for p in points:
        keyed[(FORMATS[p.format].codebook, p.m, p.n, p.k)].append(p)
    return {
        key: {v: t for v, t in group[0].times_ns.items() if t and v in group[0].eligible}
        for key, group in keyed.items()
        if len(group) == 1
    }


def beyond_noise(times: Mapping[str, Sequence[int]], variant: str, best: str, seed: int) -> float | None:
    """The lower end of the 95% bootstrap interval of median(variant) / median(best) - 1, floored at 0:
    the part of a regret the recording's own dispatch noise cannot explain (None: no dispatches)."""
    import numpy as np

    if variant == best:
        return 0.0
    a, b = times.get(variant), times.get(best)
    if not a or not b:
        return None
    rng = np.random.default_rng(seed)
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ra = np.median(xa[rng.integers(0, len(xa), (NOISE_BOOTSTRAP, len(xa)))], axis=1)
    rb = np.median(xb[rng.integers(0, len(xb), (NOISE_BOOTSTRAP, len(xb)))], axis=1)
    return max(0.0, float(np.percentile(ra / rb, 2.5)) - 1.0)


def loso(
    points: Sequence[MeasuredPoint],
    geometry: Geometry | None = None,
    shapes: Sequence[tuple[int, int]] | None = None,
    validity: Validity = always_valid,
    dispatches: Dispatches | None = None,
    policies: Mapping[str, Answerer] = POLICIES,
    jobs: int = 1,
) -> dict[str, Any]:
    """Leave-one-shape-out per policy; with ``dispatches``, each regret also beyond noise (beyond_noise)."""
    answered: dict[str, list[float]] = defaultdict(list)
    noise: dict[str, list[float]] = defaultdict(list)
    charged: dict[str, list[float]] = defaultdict(list)
    per_codebook: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    uncovered: Counter[str] = Counter()
    worst: dict[str, list[tuple[float, str]]] = defaultdict(list)
    started = time.monotonic()
    held_shapes: set[tuple[int, int]] = set()
    for (n, k), name, p, variant in held_out_answers(points, geometry, policies, shapes, validity, jobs):
        held_shapes.add((n, k))
        if variant is None:
            uncovered[name] += 1
            charged[name].append(UNMEASURED)
            per_codebook[name][p.codebook].append(UNMEASURED)
            continue
        r = regret(p, variant)
        answered[name].append(r)
        charged[name].append(r)
        per_codebook[name][p.codebook].append(r)
        times = p.times_us or {}
        best = min(times, key=lambda v: (times[v], v))
        series = (dispatches or {}).get(p.point)
        if series is not None:
            beyond = (
                UNMEASURED
                if variant not in times
                else beyond_noise(series, variant, best, abs(hash(p.point)))
            )
            if beyond is not None:
                noise[name].append(beyond)
        worst[name].append((r, f"CB={p.codebook} M={p.m} {n}x{k} ({p.shape}): chose {variant}, best {best}"))
    every = {(p.n, p.k) for p in points}
    out: dict[str, Any] = {
        "shapes": len(held_shapes),
        "subset": None if held_shapes == every else f"{len(held_shapes)} of {len(every)} shapes held out",
        "points": len(charged["chosen"]),
        "seconds": round(time.monotonic() - started, 1),
        "policies": {},
    }
    for name in policies:
        out["policies"][name] = {
            "answered": summary(answered[name]),
            "uncovered_points": uncovered[name],
            "all_points_uncovered_charged_100pct": summary(charged[name]),
            "beyond_noise_uncovered_charged_100pct": {
                "points": len(noise[name]) + uncovered[name],
                **summary(noise[name] + [UNMEASURED] * uncovered[name]),
            }
            if noise[name]
            else None,
            "by_codebook_uncovered_charged": {
                str(cb): {"points": len(v), **summary(v)} for cb, v in sorted(per_codebook[name].items())
            },
            "worst_points": [
                f"{r * 100:.1f}%: {where}" for r, where in sorted(worst[name], key=lambda w: -w[0])[:5]
            ],
        }
    chosen = out["policies"]["chosen"]["all_points_uncovered_charged_100pct"]
    chosen_noise = out["policies"]["chosen"]["beyond_noise_uncovered_charged_100pct"]
    out["targets"] = {
        "mean_max": MEAN_TARGET,
        "p95_max": P95_TARGET,
        "chosen_meets": out["subset"] is None
        and chosen["mean"] is not None
        and chosen["mean"] <= MEAN_TARGET
        and chosen["p95"] is not None
        and chosen["p95"] <= P95_TARGET,
        "chosen_meets_beyond_noise": None
        if chosen_noise is None
        else out["subset"] is None
        and chosen_noise["mean"] is not None
        and chosen_noise["mean"] <= MEAN_TARGET
        and chosen_noise["p95"] is not None
        and chosen_noise["p95"] <= P95_TARGET,
    }
    return out


def dialect_for(points: Sequence[RecordedPoint], phase: str) -> str:
    """struct-table for the built-in package's current variants; Llaminar's KB/TW dialect for a recording
    of the older KB/TW space (its names no longer parse as the package's)."""
    _, outside = current_names(list(points), phase)
    if not outside:
        return "struct-table"
    codec = get_codec(phase)
    try:
        for name in outside:
            codec.parse_variant(name)
    except ValueError as exc:
        raise DataError(f"variants neither of the current package nor Llaminar's: {exc}") from None
    return f"llaminar-rocm-{phase}"


def in_sample(session: Any, arch: str, phase: str, dialect: str) -> dict[str, Any]:
    table = build_table(session, arch, phase, dialect)
    m = table.metrics
    return {
        "dialect": dialect,
        "coverage": m.coverage,
        "exact_hit_rate": m.exact_hit_rate,
        "exact_entry_rate": m.exact_entry_rate,
        "mean_regret": m.mean_regret,
        "p95_regret": m.p95_regret,
        "max_regret": m.max_regret,
        "exact_entries": m.entries,
        "fallback_rules": m.fallback_rules,
        "overlay_threshold": m.overlay_threshold,
        "fallback_held_out_mean_regret": m.segments_cv_regret,
        "fallback_policies": {str(cb): policy for cb, policy in sorted(table.fallback_policies.items())},
        "checks": list(table.checks),
    }


def trainer_comparison(points: Sequence[RecordedPoint], arch: str, workdir: Path) -> dict[str, Any]:
    """Import a trainer CSV written from the recording; the table's regret against the trainer's choice."""
    rows = trainer_rows([p for p in points if p.arch == arch and p.phase == "decode"])
    path = workdir / f"trainer-{arch}.csv"
    write_csv(rows, path)
    url = f"sqlite:///{workdir / f'trainer-{arch}.sqlite3'}"
    upgrade(url)
    parsed = parse_files([(path.name, path.read_text())], arch)
    with session_scope(url) as session:
        store_rows(session, parsed)
    with session_scope(url) as session:
        table = build_table(session, arch, "decode", "llaminar-rocm-decode")
    answers = {(d.codebook, d.m, d.n, d.k): d.variant for d in table.decisions}
    keyed: dict[tuple[int, int, int, int], dict[str, dict[str, float]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for r in rows:
        if r["variant"] != "AUTO" and r["correctness_pass"]:
            key = (int(str(r["codebook"])), int(str(r["m"])), int(str(r["n"])), int(str(r["k"])))
            keyed[key][str(r["format"])][str(r["variant"])] = float(str(r["min_us"]))
    ours: list[float] = []
    trainer: list[float] = []
    excess: list[float] = []
    for key, aliases in keyed.items():
        common = set.intersection(*(set(t) for t in aliases.values()))
        worst = {v: max(t[v] / min(t.values()) for t in aliases.values()) for v in common}
        best = min(worst.values())
        mine = worst[str(answers[key])] / best - 1
        theirs = worst.get(min((t[v], v) for t in aliases.values() for v in t)[1], float("inf")) / best - 1
        ours.append(mine)
        trainer.append(theirs)
        excess.append(mine - theirs)
    threshold = table.metrics.overlay_threshold or 0.0
    return {
        "csv_rows": len(rows),
        "codebook_keys": len(ours),
        "aliases": sorted({f for a in keyed.values() if len(a) > 1 for f in a}),
        "table_regret": summary(ours),
        "trainer_choice_regret": summary(trainer),
        "max_excess_over_trainer": max(excess) if excess else None,
        "overlay_threshold": threshold,
        "targets": {
            "max": IN_SAMPLE_MAX,
            "mean": IN_SAMPLE_MEAN,
            "meets": bool(ours)
            and max(ours) <= IN_SAMPLE_MAX + 1e-12
            and statistics.fmean(ours) <= IN_SAMPLE_MEAN
            and max(excess) <= threshold + 1e-12,
        },
    }


def run(
    data: Path,
    allow_host: bool,
    trainer: bool,
    shapes: Sequence[tuple[int, int]] | None = None,
    policies: Mapping[str, Answerer] = POLICIES,
    jobs: int = 1,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="table-regret-") as tmp:
        url, points, provenance = open_measured(data, Path(tmp))
        hosts = [a for a in provenance["arches"] if get_arch(a).backend == "host"]
        if hosts and not allow_host:
            raise DataError(
                f"{data}: host (CPU) data, not GPU; pass --allow-host to run on it anyway (labelled)"
            )
        datasets: dict[str, Any] = {}
        for (arch, phase), group in sorted(group_by_arch(points).items()):
            with session_scope(url) as session:
                collapsed = collapse_aliases(alias_points(session, arch, phase))
                measured = [
                    MeasuredPoint(c.choice.codebook, c.choice.m, c.choice.n, c.choice.k, c.choice.shape,
                                  c.choice.variant, c.times.times_us)
                    for c in collapsed if c.times is not None
                ]  # fmt: skip
                final = in_sample(session, arch, phase, dialect_for(group, phase))
            names = sorted({v for p in measured for v in p.times_us or {}})
            entry: dict[str, Any] = {
                "data_kind": "host CPU data (labelled)" if arch in hosts else "measured GPU data",
                "source": f"measured on {arch} ({get_arch(arch).label})"
                + (" - HOST CPU, not a GPU" if arch in hosts else ""),
                "recorded_points": len(group),
                "codebook_keys": len(measured),
                "leave_one_shape_out": loso(
                    measured,
                    geometry_for(names, arch),
                    [s for s in shapes if s in {(p.n, p.k) for p in measured}] if shapes else None,
                    validity_for(names, arch),
                    dispatches_of(group),
                    policies,
                    jobs,
                ),
                "validity": "the tb-decode package's restrictions at each point (a variant invalid there "
                "is never answered by the neighbours policy)"
                if validity_for(names, arch) is not always_valid
                else "none known (names outside the current package): measured times alone",
                "final_table_in_sample": final,
            }
            if trainer and phase == "decode" and final["dialect"].startswith("llaminar"):
                entry["imported_trainer_csv_in_sample"] = trainer_comparison(points, arch, Path(tmp))
            elif trainer and phase == "decode":
                entry["imported_trainer_csv_in_sample"] = (
                    "skipped: Llaminar's trainer schema carries KB/TW variants; this data holds the current "
                    "tb-decode space, which it cannot name"
                )
            datasets[f"{arch}-{phase}"] = entry
    return {"data": provenance, "datasets": datasets}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, required=True, help="database (.sqlite3[.gz]) or recording (.json.gz)"
    )
    parser.add_argument("--allow-host", action="store_true", help="run on host (CPU) data too, labelled")
    parser.add_argument("--no-trainer", action="store_true", help="skip the imported trainer CSV comparison")
    parser.add_argument(
        "--held-out-shapes",
        default="",
        help="NxK[,NxK...]: hold out only these shapes (quick look: the JSON says subset, claims no target)",
    )
    parser.add_argument(
        "--policies",
        default="",
        help="P[,P...]: report only these policies (chosen always; e.g. leave out the slow surrogate tree "
        f"on a large recording); known: {', '.join(POLICIES)}",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="held-out shapes fitted in parallel (worker processes; the same answers): e.g. the 110-shape "
        "dense recording",
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        shapes = [(int(n), int(k)) for n, k in (s.split("x") for s in args.held_out_shapes.split(",") if s)]
    except ValueError:
        parser.error(f"--held-out-shapes: expected NxK[,NxK...], got {args.held_out_shapes!r}")
    wanted = {p for p in args.policies.split(",") if p} | {"chosen"}
    if wanted - set(POLICIES):
        parser.error(f"--policies: unknown {', '.join(sorted(wanted - set(POLICIES)))}")
    policies = {name: fit for name, fit in POLICIES.items() if not args.policies or name in wanted}
    try:
        body = run(
            args.data, args.allow_host, not args.no_trainer, shapes or None, policies, max(1, args.jobs)
        )
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = {
        "bench": "table_regret",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(
            ["python", "bench/table_regret.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "regret": "worst-alias time(answer) / time(best achievable choice) - 1, measured medians "
        "(sweep data) or min_us (the trainer CSV)",
        **body,
        "seconds": round(time.monotonic() - started, 1),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
