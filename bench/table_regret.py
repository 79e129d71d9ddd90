"""Held-out regret of the fitted table fallback versus a modal-winner baseline.

Leave-one-shape-out over every (N, K) shape: the fallback is fitted (regret-optimal
segments, CV-chosen segment counts) on all other shapes, then answers the held-out
shape's points; regret = time(answer) / time(best) - 1 from the measured times.
The baseline uses the same segments but takes each segment's most frequent winner
(what a winners-only generator does). Both answer nothing where the held-out shape's
(codebook, M, aspect class) group has no other shape; such points are counted as
uncovered and left out of the regret figures.

Data (stated in the JSON):
  host-decode: a real host-backend decode sweep (C kernels on this CPU), run here;
  synthetic-prefill: a synthetic-but-realistic Llaminar trainer CSV (tile-quantisation
    + roofline model with seeded noise, written by this script), imported through
    service.imports.llaminar_csv like a real one. It is NOT measured data.
Prints JSON; --output writes it too.
Usage: .venv/bin/python bench/table_regret.py [--output bench/results/table-regret-DATE.json]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import select

from kernels.formats.registry import FORMATS
from service.db.migrate import upgrade
from service.db.models import Task
from service.db.session import session_factory
from service.imports.llaminar_csv import PREFILL_HEADER, parse_files, store_rows
from service.sweeps.service import submit_sweep
from service.sweeps.spec import SweepSpec
from service.tables.collapse import collapse_aliases
from service.tables.fallback import RuleMap, aspect_class, fit_fallback, pick_rule
from service.tables.metrics import percentile
from service.tables.model import FallbackRule, MeasuredPoint
from service.tables.versions import alias_points, build_table
from workers.backends.registry import create_backend
from workers.execute import execute_task

HOST_SHAPES = [  # moderate sizes so a CPU sweep stays short; several shapes per aspect class
    ("B_512", 512, 512), ("B_768", 768, 768), ("B_1024", 1024, 1024), ("B_1536", 1536, 1536),
    ("B_2048", 2048, 2048), ("W_1024x256", 1024, 256), ("W_2048x512", 2048, 512),
    ("W_3072x1024", 3072, 1024), ("W_4096x1024", 4096, 1024), ("T_256x1024", 256, 1024),
    ("T_512x2048", 512, 2048), ("T_1024x4096", 1024, 4096),
]  # fmt: skip
PREFILL_SHAPES = [
    ("Qwen36_Attn_QKVProjection", 12288, 5120), ("Qwen36_FFN_GateUp", 17408, 5120),
    ("Qwen36_FFN_DownProjection", 5120, 17408), ("Qwen36_GDN_InnerProjection", 10240, 5120),
    ("Qwen36_GDN_ZProjection", 6144, 5120), ("Qwen36_GDN_TimeProjection", 1024, 5120),
    ("Qwen36_GDN_OutputProjection", 5120, 6144), ("35BMoE_Expert_GateUp", 512, 2048),
    ("35BMoE_Expert_Down", 2048, 512), ("Qwen36MoE_GDN_QKVProjection", 8192, 2048),
    ("Qwen36MoE_GDN_ZProjection", 4096, 2048),
]  # fmt: skip
PREFILL_VARIANTS = [(n, mt, mb, u) for n in (64, 128) for mt in (16, 32) for mb in (1, 2) for u in (2, 4)]


def host_sweep(url: str, artifacts: Path, dispatches: int) -> dict[str, Any]:
    """Run a real host decode sweep (Q8_0, Q4_0; M 1, 2) into the database at url."""
    spec = SweepSpec(
        arch="host", phase="decode", formats=["Q8_0", "Q4_0"], m=[1, 2],
        shapes=[{"name": s, "n": n, "k": k} for s, n, k in HOST_SHAPES],  # type: ignore[misc]
        min_dispatches=dispatches, max_dispatches=dispatches, strategy="exhaustive",
        labels={"bench": "table_regret"},
    )  # fmt: skip
    factory = session_factory(url)
    with factory.begin() as session:
        sweep, _ = submit_sweep(session, spec, None, "bench")
        task_ids = list(session.scalars(select(Task.id).where(Task.sweep_id == sweep.id).order_by(Task.id)))
    backend = create_backend("host", artifacts)
    device = backend.detect()
    started = time.monotonic()
    for task_id in task_ids:
        execute_task(factory, task_id, backend)
    return {
        "tasks": len(task_ids),
        "device": getattr(device, "name", "?"),
        "sweep_seconds": time.monotonic() - started,
    }


def synthetic_prefill_csv(seed: int = 7) -> str:
    """A trainer-shaped CSV from a tile-quantisation + roofline model (labelled synthetic)."""
    rng = random.Random(seed)
    lines = [",".join(PREFILL_HEADER)]
    for fmt in ("Q4_K", "Q8_0"):
        bits = FORMATS[fmt].bits_per_weight
        for m in (64, 128, 512, 2048):
            for shape, n, k in PREFILL_SHAPES:
                times = {}
                for n_tile, m_tile, mb, unroll in PREFILL_VARIANTS:
                    tiles = math.ceil(n / n_tile) * math.ceil(m / m_tile)
                    waves = math.ceil(tiles / (60 * 2 * mb))  # 60 CUs, blocks per CU
                    pad = (math.ceil(n / n_tile) * n_tile / n) * (math.ceil(m / m_tile) * m_tile / m)
                    compute_us = (
                        2
                        * m
                        * n
                        * k
                        / 26e6
                        * pad
                        * (1.0 if unroll == 4 else 1.06)
                        * (0.97 if m_tile == 32 else 1.0)
                    )
                    memory_us = (
                        n
                        * k
                        * bits
                        / 8
                        / 1e6
                        / 0.8
                        * (1.0 if n_tile == 128 else 1.08)
                        * (1.0 + 0.1 * (mb - 1))
                    )
                    tail = 1.0 + 0.15 * (waves * 60 * 2 * mb - tiles) / max(waves * 60 * 2 * mb, 1)
                    times[(n_tile, m_tile, mb, unroll)] = (
                        max(compute_us, memory_us) * tail * rng.lognormvariate(0, 0.02)
                    )
                best = min(times, key=times.__getitem__)
                for (n_tile, m_tile, mb, unroll), t in times.items():
                    lines.append(
                        f"rocm,prefill,{fmt},{FORMATS[fmt].codebook},{shape},synthetic,{m},{n},{k},"
                        f"N{n_tile}/MT{m_tile}/MB{mb}/U{unroll},{t:.3f},{t * 1.03:.3f},{t * 0.01:.3f},"
                        f"{2 * m * n * k / t / 1e3:.1f},0.9999,1,{int((n_tile, m_tile, mb, unroll) == best)}"
                    )
    return "\n".join(lines) + "\n"


def modal_rules(train: Sequence[MeasuredPoint], fitted: RuleMap) -> RuleMap:
    """Same segments as the fitted fallback, each taking its most frequent training winner."""
    out: RuleMap = {}
    for key, rules in fitted.items():
        members = [p for p in train if (p.codebook, p.m, aspect_class(p.n, p.k)) == key]
        new = []
        for rule in rules:
            wins = Counter(p.winner for p in members if pick_rule(rules, p.work_items) is rule)
            variant = min(wins, key=lambda v: (-wins[v], v)) if wins else rule.variant
            new.append(
                FallbackRule(rule.codebook, rule.m, rule.aspect, rule.max_work_items, variant, rule.points)
            )
        out[key] = tuple(new)
    return out


def answer(rules: RuleMap, p: MeasuredPoint) -> str | None:
    group = rules.get((p.codebook, p.m, aspect_class(p.n, p.k)))
    return pick_rule(group, p.work_items).variant if group else None


def summary(regrets: list[float]) -> dict[str, float | None]:
    if not regrets:
        return {"mean": None, "p95": None, "max": None}
    return {"mean": sum(regrets) / len(regrets), "p95": percentile(regrets, 95.0), "max": max(regrets)}


def regret(p: MeasuredPoint, variant: str) -> float:
    assert p.times_us is not None
    t = p.times_us.get(variant)
    return 1.0 if t is None else t / min(p.times_us.values()) - 1.0  # unmeasured: charged 100%


def loso(points: list[MeasuredPoint]) -> dict[str, Any]:
    shapes = sorted({(p.n, p.k) for p in points})
    fitted_r: list[float] = []
    modal_r: list[float] = []
    uncovered = 0
    for shape in shapes:
        train = [p for p in points if (p.n, p.k) != shape]
        held = [p for p in points if (p.n, p.k) == shape]
        rules = fit_fallback(train)
        baseline = modal_rules(train, rules)
        for p in held:
            a, b = answer(rules, p), answer(baseline, p)
            if a is None or b is None:
                uncovered += 1
                continue
            fitted_r.append(regret(p, a))
            modal_r.append(regret(p, b))
    return {
        "shapes": len(shapes),
        "points": len(points),
        "held_out_points_answered": len(fitted_r),
        "held_out_points_uncovered": uncovered,
        "fitted_fallback": summary(fitted_r),
        "modal_winner_baseline": summary(modal_r),
        "fitted_better_points": sum(a < b - 1e-12 for a, b in zip(fitted_r, modal_r, strict=True)),
        "modal_better_points": sum(b < a - 1e-12 for a, b in zip(fitted_r, modal_r, strict=True)),
    }


def dataset(session: Any, arch: str, phase: str, dialect: str) -> dict[str, Any]:
    collapsed = collapse_aliases(alias_points(session, arch, phase))
    points = [
        MeasuredPoint(c.choice.codebook, c.choice.m, c.choice.n, c.choice.k, c.choice.shape, c.choice.variant,
                      c.times.times_us, c.times.ties)
        for c in collapsed if c.times is not None
    ]  # fmt: skip
    table = build_table(session, arch, phase, dialect)
    m = table.metrics
    return {
        "leave_one_shape_out": loso(points),
        "final_table_in_sample": {
            "coverage": m.coverage,
            "exact_hit_rate": m.exact_hit_rate,
            "exact_entry_rate": m.exact_entry_rate,
            "mean_regret": m.mean_regret,
            "p95_regret": m.p95_regret,
            "max_regret": m.max_regret,
            "exact_entries": m.entries,
            "fallback_rules": m.fallback_rules,
            "overlay_threshold": m.overlay_threshold,
            "fallback_grouped_cv_mean_regret": m.segments_cv_regret,
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dispatches", type=int, default=15, help="timed dispatches per host variant")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="table-regret-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.sqlite3'}"
        upgrade(url)
        sweep = host_sweep(url, Path(tmp) / "artifacts", args.dispatches)
        factory = session_factory(url)
        with factory.begin() as session:
            store_rows(session, parse_files([("synthetic_prefill.csv", synthetic_prefill_csv())], "gfx906"))
        with factory.begin() as session:
            host = dataset(session, "host", "decode", "llaminar-rocm-decode")
            prefill = dataset(session, "gfx906", "prefill", "llaminar-rocm-prefill")
    result = {
        "bench": "table_regret",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
        },
        "command": " ".join([".venv/bin/python", *sys.argv]),
        "regret": "time(answer) / time(best measured variant) - 1; held-out = leave-one-shape-out",
        "baseline": "same segments as the fitted fallback, each taking its most frequent training winner",
        "datasets": {
            "host-decode": {
                "source": "measured: host backend decode sweep on this machine's CPU",
                **sweep,
                **host,
            },
            "synthetic-prefill": {
                "source": "SYNTHETIC trainer CSV (tile-quantisation + roofline model, 2% lognormal noise), "
                "imported through the Llaminar CSV importer; not measured",
                **prefill,
            },
        },
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
