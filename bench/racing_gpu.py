"""Exhaustive per-dispatch recordings of the built-in decode GEMV on real GPUs, and racing replayed on them.

``record``: every variant of tb-decode, ``--dispatches`` (200) interleaved timed dispatches each, at every
point (format x shape x M) of the qwen36 profile plus a log-spaced N x K grid, one process per GPU
(pinned with CUDA_VISIBLE_DEVICES), through the product's own backend and runner (NVRTC, weight rotation
beyond L2, parity, CUPTI clocks). Problems (GGUF blocks, packed layout, FP32 reference) are built ahead in
a pool of CPU processes with the runner's own ``build_problem``, so the GPU waits on the CPU as little as
possible; parity is checked on a seeded 512-row sample above ``--sample-above`` weights (NaNs anywhere
still fail). Points run format by format, shapes spread over the GPUs by size; at ``--deadline-s`` each
process stops before its next point, so a time box costs whole points, never half-timed ones.
The recording (.json.gz) keeps every device time: racing replays, table generalisation (leave one shape
out) and anything else can be recomputed from it without a GPU. ``--prune-from RECORDING --prune-within
X``: per M, only the variants that came within X of the best at some point of that M in an earlier
recording of the same format (plus, per M, the space's variants that recording never timed, of the
smallest mx >= M: the kernels added since), so a 110-shape recording fits one GPU's time box; its
regrets are then over that pruned space (the JSON says so).

``replay``: bench/racing_vs_exhaustive.py's replay (RacingPolicy fed the recorded dispatches round by
round; winners by the stored-winner rule) over a recording, with the two headline figures named plainly:
``dispatch_reduction`` and ``agreement_decided`` (agreement where the exhaustive decision is decided with
a gap above ``--gap``).

    python3 bench/racing_gpu.py record --arch sm_90 --gpus 0,1 --formats Q4_0,Q4_K,Q8_0 --deadline-s 170 \\
        --out $OUT/racing-gpu-h200.json.gz                      # on the 2x H200 machine
    .venv/bin/python bench/racing_gpu.py replay --recording bench/results/racing-gpu-h200-DATE.json.gz \\
        --rotations 4 --out bench/results/racing-gpu-h200-DATE.json
    .venv/bin/python bench/racing_gpu.py record --arch host --gpus 0 --shapes smoke --formats Q4_0 \\
        --dispatches 40 --out var/rec-host.json.gz              # the same path on a machine without a GPU
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import multiprocessing
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

GRID_N = (256, 640, 1536, 4096, 10240, 24576)  # x2.5 steps
GRID_K = (512, 1280, 3072, 7168, 16384)  # ~x2.4 steps; multiples of 256 (K-quant super-blocks)
# the geometric midpoints of the grid's steps (N on 128 rows, K on 256): "+mid" fills the gaps in which
# leave-one-shape-out found the tb-decode winners flipping between neighbours 1.3 octaves apart
MID_N = tuple(round(math.sqrt(a * b) / 128) * 128 for a, b in itertools.pairwise(GRID_N))
MID_K = tuple(round(math.sqrt(a * b) / 256) * 256 for a, b in itertools.pairwise(GRID_K))
DEFAULT_SAMPLE_ABOVE = 1 << 22
SAMPLE_ROWS = 512
Unit = tuple[str, str, int, int]  # (format, shape name, n, k): all M of one weight matrix


def shape_list(which: str) -> list[tuple[str, int, int]]:
    """qwen36+grid: the qwen36 profile (12 shapes) + the 6 x 5 log-spaced grid; qwen36+grid+mid: and
    the grid's midpoints too (11 x 9 values; 110 shapes, one already a qwen36 one); or a profile name."""
    from kernels.profiles import profile_shapes

    if which in ("qwen36+grid", "qwen36+grid+mid"):
        shapes = [(s.name, s.n, s.k) for s in profile_shapes("qwen36")]
        ns: tuple[int, ...] = GRID_N
        ks: tuple[int, ...] = GRID_K
        if which.endswith("+mid"):
            ns, ks = tuple(sorted(GRID_N + MID_N)), tuple(sorted(GRID_K + MID_K))
        known = {(n, k) for _, n, k in shapes}
        return shapes + [(f"Grid_N{n}_K{k}", n, k) for n in ns for k in ks if (n, k) not in known]
    return [(s.name, s.n, s.k) for s in profile_shapes(which)]


def split_units(units: Sequence[Unit], gpus: int) -> list[list[Unit]]:
    """Per format, the shapes go to the least-loaded GPU by weight count (biggest first)."""
    shares: list[list[Unit]] = [[] for _ in range(gpus)]
    formats = list(dict.fromkeys(u[0] for u in units))
    for fmt in formats:
        load = [0] * gpus
        mine = sorted((u for u in units if u[0] == fmt), key=lambda u: -u[2] * u[3])
        picked: list[list[Unit]] = [[] for _ in range(gpus)]
        for unit in mine:
            g = load.index(min(load))
            load[g] += unit[2] * unit[3] + 4_000_000  # + a fixed cost per point
            picked[g].append(unit)
        for g in range(gpus):  # small shapes first inside a format: many points early
            shares[g] += sorted(picked[g], key=lambda u: u[2] * u[3])
    return shares


def pruned_variants(
    recording: Path,
    formats: Sequence[str],
    ms: Sequence[int],
    space: Sequence[tuple[str, int]],
    within: float,
) -> dict[int, list[str]]:
    """Per M, the variants of ``space`` ((name, mx) in declared order) to time: those within ``within``
    of the best (by median) at some point of that M and one of ``formats`` in ``recording``, and those
    the recording never timed whose mx is the smallest mx >= M of the space (new kernels, untested)."""
    import statistics

    with gzip.open(recording, "rt") as fh:
        points = json.load(fh)["points"]
    timed = {v for p in points for v, t in p["times_ns"].items() if t}
    out: dict[int, list[str]] = {}
    for m in ms:
        near: set[str] = set()
        for p in points:
            if p["m"] != m or p["format"] not in formats:
                continue
            med = {v: statistics.median(t) for v, t in p["times_ns"].items() if t and v in set(p["eligible"])}
            if med:
                best = min(med.values())
                near |= {v for v, t in med.items() if t <= best * (1 + within)}
        if not near:
            raise SystemExit(f"--prune-from {recording}: no {'/'.join(formats)} point at M = {m}")
        fit = min((mx for _, mx in space if mx >= m), default=None)
        out[m] = [v for v, mx in space if v in near or (v not in timed and mx == fit)]
    return out


# -- record: one process per GPU -------------------------------------------------------------------


def build_unit(fmt: str, n: int, k: int, ms: Sequence[int], seed: int, sample_above: int) -> list[Any]:
    """The problems of every M of one matrix (in a CPU process): quantized once, a reference per M."""
    import numpy as np

    from kernels.formats.packing import PACKABLE
    from kernels.formats.registry import get_format
    from kernels.reference import Problem, pack_chunked, quantize_random, reference_gemv, sample_rows

    quant = get_format(fmt)
    weights = quantize_random(quant, n, k, seed)
    packed = pack_chunked(quant, weights) if fmt in PACKABLE else None
    rows = sample_rows(n, SAMPLE_ROWS, seed) if n * k > sample_above else None
    problems = []
    for m in ms:  # the same x as build_problem: seeded by (seed, 2)
        x = np.random.default_rng([seed, 2]).standard_normal((m, k), dtype=np.float32)
        expected = reference_gemv(quant, weights, x, rows)
        problems.append(Problem(quant, n, k, m, seed, weights, x, expected, rows, packed))
    return problems


class Recorder:
    """One pinned process: problems built ahead by CPU processes, timed here point by point."""

    def __init__(self, args: argparse.Namespace) -> None:
        from kernels.packages.loader import builtin_packages

        self.args = args
        self.deadline = time.monotonic() + args.deadline_s
        self.ms = [int(v) for v in args.m.split(",")]
        self.queue: list[Unit] = [tuple(u) for u in json.loads(args.units)]  # type: ignore[misc]
        ctx = multiprocessing.get_context("spawn")  # builders never touch the GPU runtime
        self.pool = ProcessPoolExecutor(max_workers=args.builders, mp_context=ctx)
        self.ahead: list[tuple[Unit, Future[list[Any]]]] = []
        self.fill()  # before the GPU runtime starts in this process
        self.package = builtin_packages()["tb-decode"]
        self.prebuilt: dict[tuple[str, int, int, int], Any] = {}

    def fill(self) -> None:
        while len(self.ahead) < self.args.builders + 1 and self.queue:
            fmt, _, n, k = unit = self.queue.pop(0)
            job = self.pool.submit(build_unit, fmt, n, k, self.ms, 0, self.args.sample_above)
            self.ahead.append((unit, job))

    def run(self) -> None:
        from workers import runner
        from workers.backends.registry import backend_name_for_arch, create_backend

        backend = create_backend(backend_name_for_arch(self.args.arch), Path(self.args.artifacts))
        if backend.detect() is None:
            raise SystemExit(f"no {self.args.arch} device in this process")
        variants = tuple(v.name for v in self.package.space(backend.name))
        pruned: dict[str, list[str]] = json.loads(self.args.variants) if self.args.variants else {}
        original = runner.build_task_problem

        def from_pool(package: Any, spec: Any) -> Any:  # the prebuilt problem, else the runner's own
            return self.prebuilt.pop((spec.format, spec.n, spec.k, spec.m), None) or original(package, spec)

        runner.build_task_problem = from_pool
        done = 0
        with Path(self.args.part).open("w") as out:
            while self.ahead and time.monotonic() < self.deadline:
                unit, job = self.ahead.pop(0)
                t = time.monotonic()
                problems = job.result()
                waited = time.monotonic() - t
                self.fill()
                for m, problem in zip(self.ms, problems, strict=True):
                    if time.monotonic() > self.deadline:
                        break
                    self.prebuilt[(unit[0], unit[2], unit[3], m)] = problem
                    row = self.time_point(backend, tuple(pruned.get(str(m), variants)), unit, m)
                    row["build_wait_s"], waited = round(waited, 3), 0.0
                    out.write(json.dumps(row, separators=(",", ":")) + "\n")
                    out.flush()
                    done += 1
        for process in list((getattr(self.pool, "_processes", None) or {}).values()):
            process.terminate()  # builds nobody will time (before shutdown, which forgets them)
        self.pool.shutdown(wait=False, cancel_futures=True)
        left = len(self.ahead) + len(self.queue)
        print(f"{self.args.part}: {done} points; {left} units left at the deadline", file=sys.stderr)

    def time_point(self, backend: Any, variants: tuple[str, ...], unit: Unit, m: int) -> dict[str, Any]:
        from workers.backends.base import TaskSpec

        fmt, shape, n, k = unit
        args, package = self.args, self.package
        spec = TaskSpec(args.arch, "decode", fmt, shape, n, k, m, variants, args.dispatches, args.dispatches,
                        args.warmup, 0, strategy="exhaustive", kernel=package.name,
                        kernel_version=package.version, kernel_root=str(package.root))  # fmt: skip
        t = time.monotonic()
        result = backend.run_task(spec)
        clocks = {str(v["device_clock"]) for v in result.artifact.resources.values() if v.get("device_clock")}
        return {
            "key": f"{args.arch}/decode/{fmt}/m{m}/{n}x{k}",
            "format": fmt, "shape": shape, "n": n, "k": k, "m": m,
            "device_uuid": result.device.uuid, "weight_copies": result.weight_copies,
            "seconds": round(time.monotonic() - t, 3),
            "times_ns": {r.variant: [d.device_ns for d in r.dispatches] for r in result.results},
            "eligible": sorted(r.variant for r in result.results
                               if r.parity is not None and r.parity.passed and r.error is None),
            "errors": {r.variant: r.error[:300] for r in result.results if r.error},
            "clock": sorted(clocks),
        }  # fmt: skip


def device_facts(arch: str) -> dict[str, Any]:
    facts: dict[str, Any] = {"hostname": socket.gethostname(), "cpus": os.cpu_count(), "arch": arch}
    if arch.startswith("sm_"):
        query = "--query-gpu=index,name,uuid,driver_version,clocks.max.sm"
        smi = subprocess.run(["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30, check=False)  # fmt: skip
        facts["gpus"] = [line.strip() for line in smi.stdout.splitlines() if line.strip()]
    else:
        facts["cpu"] = platform.processor() or platform.machine()
    return facts


def timed_summary(points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How many recorded points timed at least one variant, and the commonest error (first 160
    characters): a recording whose every compile failed (2026-12-01's dense one: the package had a
    merge-broken decode.hip) must say so, not report 440 points."""
    timed = sum(1 for p in points if any(p.get("times_ns", {}).values()))
    errors: dict[str, int] = {}
    for p in points:
        for e in p.get("errors", {}).values():
            head = str(e).replace("(cached NVRTC rejection) ", "")[:160]
            errors[head] = errors.get(head, 0) + 1
    top = max(errors, key=lambda e: errors[e]) if errors else None
    return {"timed_points": timed, "variant_errors": sum(errors.values()), "commonest_error": top}


def record(args: argparse.Namespace) -> int:
    from kernels.packages.loader import builtin_packages
    from workers.gpus import pinning_env

    started = time.monotonic()
    gpus = [int(g) for g in args.gpus.split(",")]
    shapes = shape_list(args.shapes)
    units: list[Unit] = [(fmt, name, n, k) for fmt in args.formats.split(",") for name, n, k in shapes]
    shares = split_units(units, len(gpus))
    work = args.out.parent / (args.out.name + ".parts")
    work.mkdir(parents=True, exist_ok=True)
    package = builtin_packages()["tb-decode"]
    backend = "cuda" if args.arch.startswith("sm_") else args.arch
    ms = [int(v) for v in args.m.split(",")]
    pruned: dict[int, list[str]] = {}
    if args.prune_from is not None:
        space = [(v.name, int(v.params["mx"])) for v in package.space(backend)]
        pruned = pruned_variants(args.prune_from, args.formats.split(","), ms, space, args.prune_within)
    children = []
    for gpu, share in zip(gpus, shares, strict=True):
        part = work / f"gpu{gpu}.jsonl"
        argv = [sys.executable, __file__, "record-child", "--arch", args.arch, "--m", args.m,
                "--dispatches", str(args.dispatches), "--warmup", str(args.warmup),
                "--units", json.dumps(share),
                "--deadline-s", str(args.deadline_s), "--builders", str(args.builders),
                "--sample-above", str(args.sample_above),
                "--artifacts", args.artifacts or str(work / f"artifacts-{gpu}"),
                "--part", str(part), "--variants", json.dumps(pruned) if pruned else ""]  # fmt: skip
        env = {**os.environ, **pinning_env(None, gpu, args.arch), "PYTHONUNBUFFERED": "1"}
        children.append((part, subprocess.Popen(argv, env=env)))
    codes = [p.wait(timeout=args.deadline_s + 600) for _, p in children]
    points = [json.loads(line) for part, _ in children if part.exists() for line in part.open()]
    order = {v.name: v.order for v in package.space(backend)}
    for point in points:
        point["order"] = {name: order.get(name, 0) for name in point["times_ns"]}
    payload = {
        "bench": "racing_gpu record",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python3", "bench/racing_gpu.py", *sys.argv[1:]]),
        "machine": device_facts(args.arch),
        "package": {"name": package.name, "version": package.version},
        "protocol": {
            "strategy": "exhaustive",
            "dispatches_per_variant": args.dispatches,
            "warmup_rounds": args.warmup,
            "order": "round-robin interleaved, start rotating each round (workers/harness/interleave.py)",
            "clock": "device_ns: CUPTI kernel duration (cuda); in-harness clock (host)",
            "parity_rows": f"{SAMPLE_ROWS}-row seeded sample above {args.sample_above} weights",
            "shapes": args.shapes,
            "formats": args.formats.split(","),
            "m": args.m,
            "variants": "the whole space"
            if not pruned
            else {
                "pruned_from": str(args.prune_from),
                "within": args.prune_within,
                "rule": "per M: within the fraction of the best at some point of that M in the earlier "
                "recording, plus the variants it never timed of the smallest mx >= M; regrets are over "
                "this pruned space",
                "per_m": {str(m): len(v) for m, v in pruned.items()},
                "names": {str(m): v for m, v in pruned.items()},
            },
        },
        "child_exit_codes": codes,
        "wall_s": round(time.monotonic() - started, 1),
        "units_planned": len(units),
        "points": points,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt") as fh:
        json.dump(payload, fh, separators=(",", ":"))
    shapes_seen = {(p["n"], p["k"]) for p in points}
    timed = timed_summary(points)
    print(json.dumps({"points": len(points), "shapes": len(shapes_seen), "wall_s": payload["wall_s"],
                      "codes": codes, "out": str(args.out), **timed}))  # fmt: skip
    if points and not timed["timed_points"]:
        print(f"error: no point timed any variant (every variant failed): {timed['commonest_error']}",
              file=sys.stderr)  # fmt: skip
        return 3
    return 0


# -- replay -----------------------------------------------------------------------------------------


def replay(args: argparse.Namespace) -> None:
    """Racing replayed on a recording; headline figures first, then racing_vs_exhaustive's full report."""
    import racing_vs_exhaustive as rve

    points, _ = rve.load_recording(args.recording)
    with gzip.open(args.recording, "rt") as fh:
        meta = {k: v for k, v in json.load(fh).items() if k != "points"}
    policies: list[tuple[str, Any, str]] = [("current", rve.RacingPolicy, "workers/harness/racing.py")]
    if args.baseline_policy_module is not None:
        module = args.baseline_policy_module
        policies.append(("baseline", rve.load_policy(module), str(module)))
    report: dict[str, Any] = {
        "bench": "racing_gpu replay",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "bench/racing_gpu.py", *sys.argv[1:]]),
        "recording": {"file": str(args.recording), **{k: meta.get(k) for k in
                      ("date", "command", "machine", "package", "protocol", "wall_s")}},
        "points": len(points),
        "shapes": len({p.key.split("/")[-1] for p in points}),
        "params": {"min_dispatches": args.min_dispatches, "max_dispatches": args.max_dispatches,
                   "min_effect": args.min_effect, "gap": args.gap, "rotations": args.rotations},
    }  # fmt: skip
    for label, policy_cls, module in policies:
        rows = [rve.point_row(p, args, 0.0, policy_cls) for p in points]
        summary = rve.summarise(rows, args.gap)
        block: dict[str, Any] = {
            "dispatch_reduction": summary["dispatch_reduction"],
            "agreement_decided": summary["new_definition"]["agreement_gap_above"],
            "points_decided_gap": summary["new_definition"]["points_gap_above"],
            "disagreements_decided": [
                {
                    k: r[k]
                    for k in (
                        "point",
                        "exhaustive_winner",
                        "exhaustive_margin",
                        "exhaustive_margin_ci",
                        "race_winner",
                        "race_stop",
                        "race_rounds",
                        "race_regret",
                    )
                }
                for r in rows
                if r["class_new"] == "decided_gap" and not r["agree_new"]
            ],
            "policy": rve.policy_description(policy_cls, module, args),
            "summary": summary,
            "by_format_m": by_group(rows, args.gap),
        }
        if args.rotations > 1:
            offsets = [i / args.rotations for i in range(1, args.rotations)]
            rotated = [rve.point_row(p, args, o, policy_cls) for o in offsets for p in points]
            rot = rve.summarise(rotated, args.gap)
            block["rotated_replays"] = {
                "why": "the same recordings replayed from other circular start rounds: more race trials",
                "start_offsets_fraction_of_budget": offsets,
                "dispatch_reduction": rot["dispatch_reduction"],
                "agreement_decided": rot["new_definition"]["agreement_gap_above"],
                "summary": rot,
            }
        block["rows"] = rows
        report[label] = block
    text = json.dumps(report, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    brief = {
        label: {
            k: report[label][k] for k in ("dispatch_reduction", "agreement_decided", "points_decided_gap")
        }
        for label, _, _ in policies
    }
    print(json.dumps({"points": report["points"], "shapes": report["shapes"], **brief}, indent=2))


def by_group(rows: Sequence[dict[str, Any]], gap: float) -> dict[str, Any]:
    import racing_vs_exhaustive as rve

    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        _, _, fmt, m, _ = row["point"].split("/")[:5]
        groups.setdefault(f"{fmt}/{m}", []).append(row)
    out = {}
    for name, items in sorted(groups.items()):
        s = rve.summarise(items, gap)
        out[name] = {"points": len(items), "dispatch_reduction": s["dispatch_reduction"],
                     "agreement_decided": s["new_definition"]["agreement_gap_above"]}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record exhaustive dispatches on the GPUs")
    child = sub.add_parser("record-child", help=argparse.SUPPRESS)
    for p in (rec, child):
        p.add_argument("--arch", default="sm_90")
        p.add_argument("--m", default="1,2,3,4")
        p.add_argument("--dispatches", type=int, default=200)
        p.add_argument("--warmup", type=int, default=3)
        p.add_argument("--deadline-s", type=float, default=170)
        p.add_argument("--builders", type=int, default=4, help="CPU processes building problems ahead")
        p.add_argument("--sample-above", type=int, default=DEFAULT_SAMPLE_ABOVE)
    rec.add_argument("--gpus", default="0,1")
    rec.add_argument("--formats", default="Q4_0,Q4_K,Q8_0")
    rec.add_argument(
        "--shapes", default="qwen36+grid", help="qwen36+grid, qwen36+grid+mid, or a profile name"
    )
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--artifacts", default="", help="compiled-kernel cache shared by the GPU processes")
    rec.add_argument("--prune-from", type=Path, default=None, help="an earlier recording (see the docstring)")
    rec.add_argument("--prune-within", type=float, default=0.0, help="with --prune-from: 0.01 = within 1%%")
    child.add_argument("--variants", default="", help="JSON {M: [variant, ...]} (default: the whole space)")
    child.add_argument("--units", required=True)
    child.add_argument("--artifacts", required=True)
    child.add_argument("--part", required=True)
    rep = sub.add_parser("replay", help="replay racing on a recording")
    rep.add_argument("--recording", type=Path, required=True)
    rep.add_argument("--min-dispatches", type=int, default=20)
    rep.add_argument("--max-dispatches", type=int, default=200)
    rep.add_argument("--min-effect", type=float, default=0.01)
    rep.add_argument("--gap", type=float, default=0.02)
    rep.add_argument("--rotations", type=int, default=4)
    rep.add_argument("--baseline-policy-module", type=Path, default=None)
    rep.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.command == "record":
        raise SystemExit(record(args))
    elif args.command == "record-child":
        Recorder(args).run()
    else:
        replay(args)


if __name__ == "__main__":
    main()
