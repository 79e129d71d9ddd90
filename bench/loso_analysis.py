"""Where leave-one-shape-out regret comes from, on a per-dispatch GPU recording (no database, no GPU).

bench/table_regret.py says how far each table policy is off at held-out shapes; this says whether the
recording could show better, and why not:

* noise: per variant the dispatch CV, per point the 95% bootstrap half-width of the ratio of medians;
* what one variant per group could do (in sample, an upper bound on what a coarse rule gets): the best
  single variant per M, per 2-octave work-size (N x K) bucket, and how many variants cover every shape
  within 1% / 3%;
* what the neighbouring shapes carry: the regret of copying the nearest shape's winner, and of the best
  (chosen with hindsight) among the winners of the k nearest shapes: if that oracle is already above
  the target, no rule that answers from the neighbours' winners can meet it on this recording;
* the neighbours policy's own LOSO (service.tables.neighbours, estimator and bandwidth by inner LOSO):
  on all points, beyond the noise (low end of the ratio's interval), on points whose winner is decided
  (runner-up beyond the noise), per M, and its worst points; beside it the tree a table emits from
  the same fold's model (neighbours_tree), which is what a held-out shape gets from the table.

Usage: python bench/loso_analysis.py --data bench/results/<recording>.json.gz --format Q4_0 [--out X.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from measured_data import RecordedPoint, load_recording  # noqa: E402

from service.tables.blas import single_blas_thread  # noqa: E402
from service.tables.metrics import percentile  # noqa: E402
from service.tables.model import MeasuredPoint  # noqa: E402
from service.tables.neighbours import fit_neighbours, neighbours_answer, neighbours_tree  # noqa: E402
from service.tables.validity import validity_for  # noqa: E402

BOOT = 400
NEAREST = (1, 2, 4, 8)


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    if not values:
        return {"points": 0, "mean": None, "p95": None, "max": None}
    return {"points": len(values), "mean": statistics.fmean(values), "p95": percentile(values, 95.0),
            "max": max(values)}  # fmt: skip


def ratio_interval(a: Sequence[int], b: Sequence[int], rng: np.random.Generator) -> tuple[float, float]:
    """95% bootstrap interval of median(a) / median(b)."""
    xa, xb = np.asarray(a, float), np.asarray(b, float)
    ra = np.median(xa[rng.integers(0, len(xa), (BOOT, len(xa)))], axis=1)
    rb = np.median(xb[rng.integers(0, len(xb), (BOOT, len(xb)))], axis=1)
    lo, hi = np.percentile(ra / rb, [2.5, 97.5])
    return float(lo), float(hi)


def regret_matrix(points: Sequence[RecordedPoint], names: Sequence[str]) -> np.ndarray:
    """points x variants regret of the parity-passing medians (nan: not timed or failed parity)."""
    out = np.full((len(points), len(names)), np.nan)
    col = {v: j for j, v in enumerate(names)}
    for i, p in enumerate(points):
        med = {v: float(np.median(t)) for v, t in p.times_ns.items() if t and v in p.eligible}
        best = min(med.values())
        for v, t in med.items():
            out[i, col[v]] = t / best - 1.0
    return out


def oracles(points: Sequence[RecordedPoint], regret: np.ndarray, names: Sequence[str]) -> dict[str, Any]:
    """Per M: one variant for all shapes, one per 2-octave work bucket, set covers (all in sample)."""
    charged = np.where(np.isnan(regret), 1.0, regret)
    out: dict[str, Any] = {}
    for m in sorted({p.m for p in points}):
        rows = np.array([p.m == m for p in points])
        sub = charged[rows]
        j = int(np.argmin(sub.mean(axis=0)))
        work = np.floor(np.log2([p.n * p.k for p in points if p.m == m]) / 2)
        bucketed = np.concatenate([sub[work == b][:, int(np.argmin(sub[work == b].mean(axis=0)))]
                                   for b in sorted(set(work))])  # fmt: skip
        covers = {}
        for within in (0.01, 0.03):
            left, chosen = set(range(len(sub))), 0
            while left:
                best = max(range(len(names)), key=lambda c: sum(sub[i, c] <= within for i in left))
                left -= {i for i in left if sub[i, best] <= within}
                chosen += 1
            covers[f"variants_covering_every_shape_within_{within:.0%}"] = chosen
        out[f"m{m}"] = {
            "best_single_variant": names[j],
            "best_single_variant_regret": summary(list(sub[:, j])),
            "one_variant_per_2_octave_work_bucket": summary(list(bucketed)),
            "work_buckets": len(set(work)),
            **covers,
        }
    return out


def neighbour_oracles(points: Sequence[RecordedPoint], regret: np.ndarray) -> dict[str, Any]:
    """Copy the nearest shape's winner; the best (with hindsight) of the k nearest shapes' winners."""
    out: dict[str, Any] = {}
    for k in NEAREST:
        copied, oracle = [], []
        for i, p in enumerate(points):
            same = [j for j, q in enumerate(points) if q.m == p.m and (q.n, q.k) != (p.n, p.k)]
            dist = [np.hypot(np.log2(points[j].n / p.n), np.log2(points[j].k / p.k)) for j in same]
            near = [same[j] for j in np.argsort(dist, kind="stable")[:k]]
            winners = {int(np.nanargmin(regret[j])) for j in near}
            got = [regret[i, w] for w in winners if not np.isnan(regret[i, w])]
            oracle.append(min(got) if got else 1.0)
            first = int(np.nanargmin(regret[near[0]]))
            copied.append(1.0 if np.isnan(regret[i, first]) else float(regret[i, first]))
        out[f"best_of_{k}_nearest_shapes_winners"] = summary(oracle)
        if k == 1:
            out["nearest_shape_winner_copied"] = summary(copied)
    return out


def neighbours_loso(points: Sequence[RecordedPoint], names: Sequence[str], arch: str) -> dict[str, Any]:
    measured = []
    for q in points:
        med = {v: float(np.median(t)) / 1000 for v, t in q.times_ns.items() if t and v in q.eligible}
        measured.append(MeasuredPoint(0, q.m, q.n, q.k, q.shape, min(med, key=med.__getitem__), med))
    valid = validity_for(list(names), arch)
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    chosen: dict[str, int] = {}
    started = time.monotonic()
    tree_seconds = 0.0
    for shape in sorted({(p.n, p.k) for p in measured}):
        models = fit_neighbours([p for p in measured if (p.n, p.k) != shape], valid)
        how = (
            f"{models[0].method} {models[0].bandwidth[0]:g}/{models[0].bandwidth[1]:g}"
            if 0 in models
            else "-"
        )
        chosen[how] = chosen.get(how, 0) + 1
        answer = neighbours_answer(models)
        tick = time.monotonic()
        trees = {cb: neighbours_tree(model) for cb, model in models.items()}
        tree_seconds += time.monotonic() - tick
        for p, rec in zip(measured, points, strict=True):
            if (p.n, p.k) != shape:
                continue
            times = p.times_us or {}
            best = min(times, key=times.__getitem__)
            runner_up = sorted(times, key=times.__getitem__)[1] if len(times) > 1 else best
            decided = (
                runner_up != best and ratio_interval(rec.times_ns[runner_up], rec.times_ns[best], rng)[0] > 1
            )
            variant = answer(p)
            if variant is None or variant not in times:
                r, low = 1.0, 1.0
            else:
                r = times[variant] / times[best] - 1.0
                low = (
                    0.0
                    if variant == best
                    else max(0.0, ratio_interval(rec.times_ns[variant], rec.times_ns[best], rng)[0] - 1.0)
                )
            tree = trees.get(p.codebook)
            emitted = None if tree is None else tree.answer(p.m, p.n, p.k)
            tree_r = 1.0 if emitted is None or emitted not in times else times[emitted] / times[best] - 1.0
            rows.append({"m": p.m, "n": p.n, "k": p.k, "shape": p.shape, "answer": variant, "best": best,
                         "regret": r, "beyond_noise": low, "winner_decided": decided, "tree_answer": emitted,
                         "tree_regret": tree_r})  # fmt: skip
    regrets = [r["regret"] for r in rows]
    return {
        "seconds": round(time.monotonic() - started, 1),
        "estimator_bandwidth_chosen_per_fold": chosen,
        "all_points": summary(regrets),
        "beyond_noise": summary([r["beyond_noise"] for r in rows]),
        "points_with_a_decided_winner": summary([r["regret"] for r in rows if r["winner_decided"]]),
        "points_with_a_tied_winner": summary([r["regret"] for r in rows if not r["winner_decided"]]),
        "by_m": {
            f"m{m}": summary([r["regret"] for r in rows if r["m"] == m])
            for m in sorted({r["m"] for r in rows})
        },
        "points_above_3pct": sum(r > 0.03 for r in regrets),
        "points_above_3pct_beyond_noise": sum(r["beyond_noise"] > 0.03 for r in rows),
        "worst": [
            f"{r['regret'] * 100:.1f}%: M={r['m']} {r['n']}x{r['k']} ({r['shape']}) chose {r['answer']}, "
            f"best {r['best']}"
            for r in sorted(rows, key=lambda r: -r["regret"])[:25]
        ],
        "emitted_tree": {
            "seconds": round(tree_seconds, 1),
            "all_points": summary([r["tree_regret"] for r in rows]),
            "by_m": {
                f"m{m}": summary([r["tree_regret"] for r in rows if r["m"] == m])
                for m in sorted({r["m"] for r in rows})
            },
            "points_above_3pct": sum(r["tree_regret"] > 0.03 for r in rows),
            "answers_unlike_the_model": sum(r["tree_answer"] != r["answer"] for r in rows),
            "worst": [
                f"{r['tree_regret'] * 100:.1f}%: M={r['m']} {r['n']}x{r['k']} ({r['shape']}) emitted "
                f"{r['tree_answer']}, best {r['best']}"
                for r in sorted(rows, key=lambda r: -r["tree_regret"])[:25]
            ],
        },
    }


def analyse(path: Path, fmt: str) -> dict[str, Any]:
    recorded, provenance = load_recording(path)
    points = sorted((p for p in recorded if p.format == fmt and p.eligible), key=lambda p: (p.m, p.n, p.k))
    if not points:
        of_format = sum(p.format == fmt for p in recorded)
        raise SystemExit(
            f"{path}: no {fmt} points"
            if not of_format
            else f"{path}: {of_format} {fmt} points recorded, none with a variant timed and parity-passing "
            "(every variant failed there: see the points' errors)"
        )
    names = sorted({v for p in points for v, t in p.times_ns.items() if t})
    regret = regret_matrix(points, names)
    rng = np.random.default_rng(1)
    cvs = [
        float(np.std(t) / np.median(t))
        for p in points
        for v, t in p.times_ns.items()
        if t and v in p.eligible
    ]
    halves = []
    for i, p in enumerate(points):
        order = np.argsort(np.where(np.isnan(regret[i]), np.inf, regret[i]))
        best, second = names[order[0]], names[order[1]]
        lo, hi = ratio_interval(p.times_ns[second], p.times_ns[best], rng)
        halves.append((hi - lo) / 2)
    dispatches = [len(t) for p in points for t in p.times_ns.values() if t]
    return {
        "data": {
            **provenance,
            "format": fmt,
            "points": len(points),
            "shapes": len({(p.n, p.k) for p in points}),
            "m": sorted({p.m for p in points}),
            "variants": len(names),
            "dispatches_per_variant": [min(dispatches), max(dispatches)],
        },
        "noise": {
            "dispatch_cv_median": float(np.median(cvs)),
            "dispatch_cv_p90": float(np.percentile(cvs, 90)),
            "runner_up_over_best_ratio_ci_half_width_median": float(np.median(halves)),
            "runner_up_over_best_ratio_ci_half_width_p90": float(np.percentile(halves, 90)),
        },
        "in_sample_oracles_per_m": oracles(points, regret, names),
        "what_the_neighbouring_shapes_carry": neighbour_oracles(points, regret),
        "neighbours_policy_loso": neighbours_loso(points, names, points[0].arch),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, required=True, help="a per-dispatch recording (.json.gz)")
    parser.add_argument("--format", default="Q4_0")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with single_blas_thread():  # the models' small solves: BLAS threads spin on a loaded host
        analysed = analyse(args.data, args.format)
    result = {"bench": "loso_analysis", "command": " ".join(["python", "bench/loso_analysis.py",
              *(argv if argv is not None else sys.argv[1:])]), **analysed}  # fmt: skip
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
