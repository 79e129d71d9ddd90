"""Dispatch by the table, measured: regret on hardware of what a generated table makes an engine launch.

``build`` (any machine with nvcc; on the GPU host for real runs):
  1. the measured points of ``--data`` (a Tunebase database or a GPU recording; bench/measured_data.py)
     are split by shape: every ``--every``-th shape by work size (or ``--held-out-shapes``) is held out;
  2. a ``cuda-struct-table`` table of the built-in decode package is generated from the other shapes
     only (the service's own generator: alias collapse, fallback policy, overlays, compile + replay);
  3. per format, a consumer program is written from the package itself (kernels/packages): its CUDA
     source compiled in with the format's defines, one kernel pointer per variant symbol, the launch
     geometry and arguments of every (held-out point, variant) from the manifest's expressions (the
     runner's own ``kernel_args``), the table included; and the data it reads: a tile of ``--rows``
     rows of real packed weights, the activations and the FP32 reference (kernels/reference.py);
  4. nvcc compiles each program for sm_90 (timeout, errors shown).
``run`` (the GPU host): each program, for every held-out point, looks the point up in the table, launches
the kernel it names and times that dispatch side by side with every variant of the point (interleaved,
CUDA events, weights rotated past 2x L2), after checking every output against the reference. The JSON
gives, per point and overall: regret on hardware = median(table dispatch) / median(best variant) - 1,
beside the regret the recording predicts for the same answer; and whether the compiled lookup answered
what the host replay of the same table answered.
``all`` = build + run. Exit 2: bad input (clear message); 3: the device is not the one built for.

    python3 bench/table_dispatch.py all --data <recording of this tb-decode version> --out $OUT/td.json
    bash bench/device_table_dispatch.sh 2026-11-30   # on the H200: records the current space first, then all
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from measured_data import (  # noqa: E402
    DataError,
    RecordedPoint,
    current_names,
    is_database,
    load_recording,
    open_measured,
)

from kernels.arches import get_arch  # noqa: E402
from kernels.formats.registry import get_format  # noqa: E402
from kernels.packages.build import compile_units  # noqa: E402
from kernels.packages.expressions import ExpressionError, parse  # noqa: E402
from kernels.packages.layouts import layout_for, needs_packing  # noqa: E402
from kernels.packages.loader import INCLUDE_DIR, builtin_packages  # noqa: E402
from kernels.packages.package import DeviceFacts, KernelPackage  # noqa: E402
from kernels.reference import build_problem  # noqa: E402
from service.db.session import session_scope  # noqa: E402
from service.tables.collapse import CollapsedPoint, collapse_aliases  # noqa: E402
from service.tables.dialects import get_dialect  # noqa: E402
from service.tables.generate import generate_table  # noqa: E402
from service.tables.metrics import percentile  # noqa: E402
from service.tables.validate import find_compiler, find_nvcc  # noqa: E402
from service.tables.versions import alias_points  # noqa: E402
from workers.runner import kernel_args, tolerance_of, weight_copies  # noqa: E402

ARCH = "sm_90"
DIALECT = "cuda-struct-table"
TEMPLATE = Path(__file__).with_name("dispatch_consumer.cu.in")
KINDS = {"ptr": 0, "i32": 1, "u32": 2, "i64": 3, "f32": 4}
COMPILE_TIMEOUT_S = 600
SEED = 20261130


class UsageError(ValueError):
    """Bad input to the bench (exit 2)."""


@dataclass
class HeldPoint:
    """One held-out measured point: what the recording says and what the table answers."""

    key: str
    format: str
    codebook: int
    m: int
    n: int
    k: int
    shape: str
    recorded_median_us: dict[str, float]  # parity-passing variants of the recording
    table_variant: str | None = None  # the host replay of the generated table
    recorded_regret: float | None = None  # that answer's regret in the recording (per format)


@dataclass
class BuildManifest:
    data: dict[str, Any]
    held_out_shapes: list[str]
    train_shapes: list[str]
    table: dict[str, Any]
    programs: dict[str, str]  # format -> binary path (relative to the build dir)
    points: list[dict[str, Any]] = field(default_factory=list)
    device: dict[str, Any] = field(default_factory=dict)


# -- the table ------------------------------------------------------------------------------------------


def pick_held_out(
    shapes: Sequence[tuple[int, int]], every: int, explicit: str | None
) -> set[tuple[int, int]]:
    if explicit:
        chosen = set()
        for item in explicit.split(","):
            n, _, k = item.strip().partition("x")
            if not (n.isdigit() and k.isdigit()):
                raise UsageError(f"--held-out-shapes: {item!r} is not NxK")
            if (int(n), int(k)) not in shapes:
                raise UsageError(f"--held-out-shapes: {item} was not measured (no points to time there)")
            chosen.add((int(n), int(k)))
        return chosen
    if every < 2:
        raise UsageError("--every must be >= 2 (some shapes must train the table)")
    ordered = sorted(shapes, key=lambda s: (s[0] * s[1], s))
    return {s for i, s in enumerate(ordered) if i % every == every // 2}


def train_table(
    collapsed: Sequence[CollapsedPoint], held: set[tuple[int, int]], package: KernelPackage
) -> tuple[str, dict[str, Any]]:
    train = [c for c in collapsed if (c.choice.n, c.choice.k) not in held]
    if not train:
        raise UsageError("every measured shape is held out: nothing trains the table")
    table = generate_table(
        [c.choice for c in train],
        [c.times for c in train if c.times is not None],
        ARCH,
        [],
        DIALECT,
        phase="decode",
        package=package,
    )
    m = table.metrics
    info = {
        "dialect": DIALECT,
        "trained_on_points": len(train),
        "exact_entries": m.entries,
        "fallback_rules": m.fallback_rules,
        "fallback_policies": {str(cb): p for cb, p in sorted(table.fallback_policies.items())},
        "in_sample_mean_regret": m.mean_regret,
        "in_sample_max_regret": m.max_regret,
        "checks": list(table.checks),
    }
    return table.text, info


def replay_answers(
    text: str, queries: Sequence[tuple[int, int, int, int]], package: KernelPackage
) -> list[str | None]:
    """What the table answers, by the host-compiled replay the validator uses (variant names)."""
    dialect = get_dialect(DIALECT, "decode", package)
    names = {dialect.parse_variant(v.name): v.name for v in package.space("cuda")}
    with tempfile.TemporaryDirectory(prefix="table-dispatch-replay-") as tmp:
        work = Path(tmp)
        (work / "generated_table.inc").write_text(text)
        (work / "replay.cpp").write_text(dialect.replay_program("generated_table.inc", queries))
        argv = [
            *find_compiler(),
            "-std=c++17",
            "-O0",
            "-I",
            str(work),
            str(work / "replay.cpp"),
            "-o",
            str(work / "replay"),
        ]
        built = subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
        if built.returncode != 0:
            raise RuntimeError(f"replay does not compile:\n{built.stderr}")
        ran = subprocess.run([str(work / "replay")], capture_output=True, text=True, timeout=120, check=False)
        if ran.returncode != 0:
            raise RuntimeError(f"replay exited {ran.returncode}: {ran.stderr}")
        answers = dialect.parse_replay_output(ran.stdout)
    return [None if answers[q] is None else names.get(answers[q]) for q in queries]  # type: ignore[arg-type]


# -- the consumer program -------------------------------------------------------------------------------


def device_facts(sms: int | None, llc: int | None) -> tuple[int, int, str]:
    """SM count and L2 bytes: the options, else the attached GPU (cuda-python), else refuse."""
    if sms is not None and llc is not None:
        return sms, llc, "given on the command line"
    try:
        from workers.harness import cuda_driver as cd

        if cd.available():
            ctx = cd.Context.open(0)
            return (
                int(ctx.attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")),
                int(ctx.attribute("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")),
                f"read from {ctx.name()}",
            )
    except Exception as exc:
        print(f"note: no CUDA device to read SMs/L2 from ({type(exc).__name__}: {exc})", file=sys.stderr)
    raise UsageError("no GPU attached: pass --sms and --llc-bytes (the program checks them on the device)")


def launch_table(
    package: KernelPackage, point: RecordedPoint, facts: DeviceFacts, parts: list[str]
) -> tuple[list[dict[str, Any]], int]:
    """Per variant (the package's cuda space, in order): geometry and typed arguments, from the manifest."""
    fmt = get_format(point.format)
    args_spec = package.args_for("cuda")
    slots = [i for i, a in enumerate(args_spec) if a.role == "workspace"]
    sentinel_w = {part: 1_000_000 + i for i, part in enumerate(parts)}
    sentinel_x, sentinel_y = 2_000_000, 3_000_000
    out: list[dict[str, Any]] = []
    for variant in package.space("cuda"):
        entry: dict[str, Any] = {"variant": variant.name, "ok": 0}
        try:
            values = package.bindings(variant, point.n, point.k, point.m, fmt, facts)
            if package.point_problems(values):
                out.append(entry)
                continue
            geometry = package.geometry(values)
            pre = package.prelaunch_geometry(values) if package.has_prelaunch(variant, "cuda") else None
            sizes = {
                i: parse(args_spec[i].size).evaluate_int(values) if args_spec[i].size else 0 for i in slots
            }
        except ExpressionError as exc:
            raise UsageError(
                f"{package.name} {variant.name} at {point.key}: manifest expression failed: {exc}"
            ) from None
        workspaces = {i: 4_000_000 + i for i in slots if sizes[i] > 0}
        built = kernel_args(args_spec, sentinel_w, sentinel_x, sentinel_y, workspaces, values)
        args = []
        for kind, value in built:
            if kind == "ptr":
                v = int(value)
                ref = (
                    -1 if v == 0 else
                    v - 1_000_000 if 1_000_000 <= v < 1_000_000 + len(parts) else
                    len(parts) if v == sentinel_x else
                    len(parts) + 1 if v == sentinel_y else
                    len(parts) + 2 + slots.index(v - 4_000_000)
                )  # fmt: skip
                args.append((KINDS["ptr"], ref, 0, 0.0))
            elif kind == "f32":
                args.append((KINDS["f32"], 0, 0, float(value)))
            else:
                args.append((KINDS[kind], 0, int(value), 0.0))
        entry.update(
            ok=1, grid=list(geometry.grid), block=list(geometry.block), shared=geometry.shared_bytes,
            args=args,
            workspace=[sizes[i] for i in slots], zero=[int(args_spec[i].zero) for i in slots],
            pre=None if pre is None else {
                "grid": list(pre.grid), "block": list(pre.block), "shared": pre.shared_bytes,
                "overlap": package.prelaunch_overlaps("cuda"),
            },
        )  # fmt: skip
        out.append(entry)
    return out, len(slots)


def write_point_data(
    out_dir: Path, index: int, package: KernelPackage, point: RecordedPoint, rows: int
) -> dict[str, int]:
    """A tile of real packed weights (``rows`` rows), x and the FP32 reference; row bytes per layout part."""
    layout = layout_for(package.manifest.weights)
    tile = min(rows, point.n)
    problem = build_problem(
        point.format, tile, point.k, point.m, seed=SEED, packed=needs_packing(package.manifest.weights)
    )
    row_bytes: dict[str, int] = {}
    for part, array in layout.arrays(problem).items():
        if array is None:
            row_bytes[part] = 0
            continue
        if array.shape[0] != tile:
            raise UsageError(f"layout {layout.name} part {part} is not row-major over N: cannot tile it")
        data = np.ascontiguousarray(array)
        (out_dir / f"{index}_{part}.bin").write_bytes(data.tobytes())
        row_bytes[part] = data.nbytes // tile
    (out_dir / f"{index}_x.bin").write_bytes(np.ascontiguousarray(problem.x, dtype=np.float32).tobytes())
    (out_dir / f"{index}_ref.bin").write_bytes(
        np.ascontiguousarray(problem.expected, dtype=np.float32).tobytes()
    )
    return row_bytes


def c_string(text: str) -> str:
    if any(c in text for c in '"\\\n') or not text.isprintable():
        raise UsageError(f"name {text!r} cannot be a C string here")
    return f'"{text}"'


def consumer_source(
    package: KernelPackage,
    fmt: str,
    points: list[dict[str, Any]],
    parts: list[str],
    slots: int,
    sms: int,
    llc: int,
) -> str:
    variants = package.space("cuda")
    units = compile_units(package, fmt, "cuda", variants)
    if len(units) != 1:
        raise UsageError(
            f"{package.name}: {len(units)} compile units for {fmt}; the consumer needs every variant in one "
            "unit "
            "(a package with [variant] instantiate + list_define)"
        )
    symbols = [package.symbol(v) for v in variants]
    if len(set(symbols)) != len(symbols):
        raise UsageError(
            f"{package.name}: variants share a symbol; the consumer needs one symbol per variant"
        )
    dialect = get_dialect(DIALECT, "decode", package)
    tolerance = tolerance_of(package)
    defines = "\n".join(f"#define {k} {v}" for k, v in sorted(units[0].defines.items()))
    max_args = max((len(lt["args"]) for p in points for lt in p["launches"] if lt["ok"]), default=1)

    def launch(lt: dict[str, Any]) -> str:
        if not lt["ok"]:
            return "{0}"
        args = ", ".join(f"{{{k}, {r}, {v}LL, {f!r}}}" for k, r, v, f in lt["args"])
        ws = ", ".join(f"{w}LL" for w in lt["workspace"]) or "0"
        zero = ", ".join(str(z) for z in lt["zero"]) or "0"
        g, b = lt["grid"], lt["block"]
        pre = lt.get("pre")  # the [prelaunch] kernel, launched before the variant with its arguments
        pg, pb = (pre["grid"], pre["block"]) if pre else ([0, 0, 0], [0, 0, 0])
        pre_mode = 0 if pre is None else 2 if pre.get("overlap") else 1
        return (f"{{1, {{{g[0]}u, {g[1]}u, {g[2]}u}}, {{{b[0]}u, {b[1]}u, {b[2]}u}}, {lt['shared']}u, "
                f"{len(lt['args'])}, {{{args}}}, {{{ws}}}, {{{zero}}}, {pre_mode}, "
                f"{{{pg[0]}u, {pg[1]}u, {pg[2]}u}}, {{{pb[0]}u, {pb[1]}u, {pb[2]}u}}, "
                f"{pre['shared'] if pre else 0}u}}")  # fmt: skip

    rows = []
    for p in points:
        rb = ", ".join(f"{p['row_bytes'][part]}LL" for part in parts)
        launches = ",\n        ".join(launch(lt) for lt in p["launches"])
        rows.append(
            f"    {{{c_string(p['key'])}, {c_string(p['format'])}, {p['codebook']}, "
            f"{p['m']}, {p['n']}, {p['k']}, "
            f"{p['tile_rows']}, {p['copies']}, {{{rb}}},\n      {{\n        {launches}\n      }}}},"
        )
    fields: Sequence[str] = dialect.fields  # type: ignore[attr-defined]
    sep = 'std::string(", ") + '
    config = "\n".join(
        f"            config += {sep if i else ''}std::to_string(static_cast<long long>(cfg.{f}));"
        for i, f in enumerate(fields)
    )
    replacements = {
        "@DEFINES@": defines,
        "@SOURCE@": str(package.sources("cuda")[0].resolve()),
        "@NAMESPACE@": dialect.namespace,  # type: ignore[attr-defined]
        "@VARIANTS@": str(len(variants)),
        "@PARTS@": str(len(parts)),
        "@SLOTS@": str(slots),
        "@MAXARGS@": str(max_args),
        "@SMS@": str(sms),
        "@L2@": str(llc),
        "@COSINE_MIN@": repr(tolerance.cosine_min),
        "@REL_L2_MAX@": repr(tolerance.rel_l2_max),
        "@KERNELS@": ", ".join(f"(const void *)&{s}" for s in symbols),
        "@PRE_KERNELS@": ", ".join(
            f"(const void *)&{package.prelaunch_symbol(v)}" if package.has_prelaunch(v, "cuda") else "nullptr"
            for v in variants
        ),
        "@NAMES@": ", ".join(c_string(v.name) for v in variants),
        "@PART_NAMES@": ", ".join(c_string(p) for p in parts),
        "@POINTS@": "\n".join(rows),
        "@STRUCT@": dialect.struct,  # type: ignore[attr-defined]
        "@STEM@": dialect.stem,  # type: ignore[attr-defined]
        "@CONFIG_EXPR@": config,
    }
    text = TEMPLATE.read_text()
    for key, value in replacements.items():
        text = text.replace(key, value)
    return text


def compile_program(source: Path, binary: Path, package: KernelPackage, timeout_s: int) -> None:
    nvcc = find_nvcc()
    if nvcc is None:
        raise UsageError("nvcc not found (set NVCC or put nvcc on PATH)")
    argv = [*nvcc, "-O3", "-std=c++17", "-arch=sm_90", "-I", str(source.parent), "-I", str(INCLUDE_DIR),
            "-I", str(package.sources("cuda")[0].parent), str(source), "-o", str(binary)]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"nvcc timed out after {timeout_s}s on {source.name}") from None
    if done.returncode != 0:
        raise RuntimeError(f"nvcc failed on {source.name}:\n{done.stderr[-4000:]}")


def usable_points(
    points: list[RecordedPoint], args: argparse.Namespace, package: KernelPackage
) -> list[RecordedPoint]:
    """The sm_90 decode points of the formats asked for, all of them named in the package's current space."""
    points = [p for p in points if p.arch == ARCH and p.phase == "decode"]
    if args.formats:
        points = [p for p in points if p.format in args.formats.split(",")]
    if not points:
        raise UsageError(
            f"{args.data}: no {ARCH} decode measurements{' of ' + args.formats if args.formats else ''}"
        )
    _, outside = current_names(points)
    if outside:
        raise UsageError(
            f"{args.data}: {len(outside)} recorded variants are not in {package.ref}'s space (e.g. "
            f"{', '.join(sorted(outside)[:3])}); the consumer launches the package's own kernels, so the "
            "data must be a recording of this version: record it first (bench/racing_gpu.py record; "
            "bench/device_table_dispatch.sh does both)"
        )
    return points


def build(args: argparse.Namespace) -> BuildManifest:
    out = Path(args.build_dir)
    out.mkdir(parents=True, exist_ok=True)
    package = builtin_packages()["tb-decode"]
    if not is_database(Path(args.data)):  # refused before the import and the winners' bootstrap
        usable_points(load_recording(Path(args.data))[0], args, package)
    with tempfile.TemporaryDirectory(prefix="table-dispatch-") as tmp:
        url, points, provenance = open_measured(Path(args.data), Path(tmp))
        points = usable_points(points, args, package)
        with session_scope(url) as session:
            collapsed = collapse_aliases(alias_points(session, ARCH, "decode"))
    shapes = sorted({(p.n, p.k) for p in points})
    held = pick_held_out(shapes, args.every, args.held_out_shapes)
    text, table_info = train_table(collapsed, held, package)
    (out / "table.cuh").write_text(text)
    targets = [p for p in points if (p.n, p.k) in held and p.eligible]
    queries = [(get_format(p.format).codebook, p.m, p.n, p.k) for p in targets]
    answers = replay_answers(text, queries, package)
    sms, llc, where = device_facts(args.sms, args.llc_bytes)
    facts = DeviceFacts("cuda", ARCH, sms, get_arch(ARCH).wave)
    parts = list(layout_for(package.manifest.weights).parts)
    data_dir = out / "data"
    data_dir.mkdir(exist_ok=True)
    manifest = BuildManifest(
        data=provenance,
        held_out_shapes=[f"{n}x{k}" for n, k in sorted(held)],
        train_shapes=[f"{n}x{k}" for n, k in shapes if (n, k) not in held],
        table=table_info,
        programs={},
        device={"sms": sms, "l2_bytes": llc, "from": where},
    )
    by_format: dict[str, list[dict[str, Any]]] = {}
    slots = 0
    for index, (p, answer) in enumerate(zip(targets, answers, strict=True)):
        medians = {v: float(np.median(t)) / 1000 for v, t in p.times_ns.items() if v in p.eligible and t}
        best = min(medians.values())
        held_point = HeldPoint(
            p.key[0] + f"/{p.format}/m{p.m}/{p.n}x{p.k}", p.format, get_format(p.format).codebook,
            p.m, p.n, p.k,
            p.shape, medians, answer,
            None if answer is None or answer not in medians else medians[answer] / best - 1,
        )  # fmt: skip
        row_bytes = write_point_data(data_dir, index, package, p, args.rows)
        launches, slots = launch_table(package, p, facts, parts)
        nbytes = sum(b * p.n for b in row_bytes.values())
        entry = asdict(held_point) | {
            "index": index, "tile_rows": min(args.rows, p.n), "row_bytes": row_bytes, "launches": launches,
            "copies": weight_copies(nbytes, llc, False), "weight_bytes": nbytes,
        }  # fmt: skip
        by_format.setdefault(p.format, []).append(entry)
        manifest.points.append({k: v for k, v in entry.items() if k != "launches"})
    jobs: list[tuple[Path, Path, int]] = []
    for fmt, pts in sorted(by_format.items()):
        source = out / f"consumer_{fmt}.cu"
        source.write_text(consumer_source(package, fmt, pts, parts, slots, sms, llc))
        manifest.programs[fmt] = f"consumer_{fmt}"
        jobs.append((source, out / f"consumer_{fmt}", len(pts)))
    if not args.no_compile and jobs:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as pool:
            list(pool.map(lambda job: compile_program(job[0], job[1], package, args.compile_timeout), jobs))
        print(f"compiled {len(jobs)} program(s) in {time.monotonic() - started:.1f}s", file=sys.stderr)
    (out / "manifest.json").write_text(json.dumps(asdict(manifest), indent=1))
    return manifest


# -- running and judging ---------------------------------------------------------------------------------


def parse_lines(stdout: str, bad: list[str] | None = None) -> list[dict[str, Any]]:
    """The program's POINT lines; a line that is not JSON goes to ``bad`` (never sinks the others)."""
    out = []
    for line in stdout.splitlines():
        if line.startswith("POINT "):
            try:
                out.append(json.loads(line[len("POINT ") :]))
            except json.JSONDecodeError as exc:
                if bad is not None:
                    bad.append(f"{exc}: {line[:300]}")
    return out


def judge(manifest: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """Regret on hardware per point and overall, beside what the recording predicts."""
    by_index = {p["index"]: p for p in manifest["points"]}
    rows = []
    for r in results:
        planned = by_index[r["index"]]
        passed = {v: d for v, d in r["variants"].items() if d["passed"] and d["times_us"]}
        failed = sorted(v for v, d in r["variants"].items() if not d["passed"])
        row: dict[str, Any] = {
            "key": planned["key"], "shape": planned["shape"], "format": r["format"], "m": r["m"], "n": r["n"],
            "k": r["k"], "copies": r["copies"], "lookup_ns": r["lookup_ns"],
            "table_variant": r["table"]["variant"],
            "replay_variant": planned["table_variant"], "parity_failed": failed,
        }  # fmt: skip
        row["lookup_matches_replay"] = r["table"]["variant"] == planned["table_variant"]
        if passed and r["table_times_us"] and r["table"]["variant"] in r["variants"]:
            medians = {v: statistics.median(d["times_us"]) for v, d in passed.items()}
            recorded = planned["recorded_median_us"]
            best = min(medians, key=medians.__getitem__)
            table_median = statistics.median(r["table_times_us"])
            recorded_best = min(recorded, key=recorded.__getitem__)
            if recorded_best in medians:  # the recording's oracle timed here: a floor for any table
                row["recorded_best_regret_on_hardware"] = medians[recorded_best] / medians[best] - 1
            row.update(
                best_variant=best, best_median_us=medians[best], table_median_us=table_median,
                regret_on_hardware=table_median / medians[best] - 1,
                table_variant_parity=r["variants"][r["table"]["variant"]]["passed"],
                recorded_regret=planned["recorded_regret"],
                recorded_best=recorded_best,
            )  # fmt: skip
        else:
            row["regret_on_hardware"] = None
            row["why_no_regret"] = "no table answer, or no parity-passing timed variant"
        rows.append(row)
    regrets = [r["regret_on_hardware"] for r in rows if r["regret_on_hardware"] is not None]
    recorded = [r["recorded_regret"] for r in rows if r.get("recorded_regret") is not None]
    oracle = [r["recorded_best_regret_on_hardware"] for r in rows if "recorded_best_regret_on_hardware" in r]

    def stats(values: list[float]) -> dict[str, float | None]:
        if not values:
            return {"mean": None, "p95": None, "max": None}
        return {"mean": statistics.fmean(values), "p95": percentile(values, 95.0), "max": max(values)}

    return {
        "points_planned": len(manifest["points"]),
        "points_timed": len(rows),
        "points_with_regret": len(regrets),
        "regret_on_hardware": stats(regrets),
        "regret_predicted_by_recording": stats(recorded),
        # the recording's fastest variant per point, timed in this program: what a perfect table trained on
        # the recording would score here (the two measurement contexts disagree by this much on their own)
        "recorded_best_regret_on_hardware": stats(oracle),
        "lookup_matches_host_replay": sum(r["lookup_matches_replay"] for r in rows),
        "table_answer_failed_parity": sum(1 for r in rows if r.get("table_variant_parity") is False),
        "points": rows,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.build_dir)
    manifest_path = out / "manifest.json"
    if not manifest_path.is_file():
        raise UsageError(f"{manifest_path}: no build here (run `build` first)")
    manifest = json.loads(manifest_path.read_text())
    results: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    unreadable: list[str] = []
    deadline = time.monotonic() + args.timeout_s
    for fmt, name in sorted(manifest["programs"].items()):
        binary = out / name
        left = deadline - time.monotonic()
        if left < 10:
            errors[fmt] = "not run: the time budget was spent"
            continue
        argv = [str(binary), str(out / "data"), str(args.reps), str(args.warmup), str(max(1.0, left - 30))]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=left, check=False)
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            (out / f"stdout_{fmt}.txt").write_text(stdout)
            results += parse_lines(stdout, unreadable)
            errors[fmt] = f"timed out after {left:.0f}s (points finished before are kept)"
            continue
        except OSError as exc:
            errors[fmt] = f"cannot run {binary}: {exc}"
            continue
        (out / f"stdout_{fmt}.txt").write_text(done.stdout + "\n# stderr\n" + done.stderr)
        results += parse_lines(done.stdout, unreadable)
        if done.returncode != 0:
            errors[fmt] = f"exit {done.returncode}: {done.stderr.strip()[-2000:]}"
            if done.returncode == 3:
                raise DeviceMismatch(done.stderr.strip())
    if unreadable:
        errors["unreadable_lines"] = "; ".join(unreadable)[:4000]
    verdict = judge(manifest, results)
    return {"build": {k: manifest[k] for k in ("data", "held_out_shapes", "train_shapes", "table", "device")},
            "errors": errors, **verdict}  # fmt: skip


class DeviceMismatch(RuntimeError):
    """The program was built for another device (exit 3)."""


def device_description() -> list[str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    query = ["--query-gpu=index,name,uuid,driver_version,clocks.max.sm", "--format=csv,noheader"]
    done = subprocess.run([smi, *query], capture_output=True, text=True, timeout=30, check=False)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("build", "run", "all"):
        p = sub.add_parser(name)
        p.add_argument(
            "--build-dir", default=None, help="where programs and data go (default: a temp dir for all)"
        )
        if name in ("build", "all"):
            p.add_argument("--data", required=True, help="measured GPU points: database or recording")
            p.add_argument("--every", type=int, default=4, help="hold out every N-th shape by work size")
            p.add_argument("--held-out-shapes", default=None, help="NxK,NxK,... instead of --every")
            p.add_argument("--formats", default=None, help="only these formats (comma separated)")
            p.add_argument("--rows", type=int, default=256, help="rows of the real weight tile")
            p.add_argument("--sms", type=int, default=None, help="SM count (default: the attached GPU)")
            p.add_argument("--llc-bytes", type=int, default=None, help="L2 bytes (default: the attached GPU)")
            p.add_argument("--compile-timeout", type=int, default=COMPILE_TIMEOUT_S)
            p.add_argument("--no-compile", action="store_true", help="write sources only")
        if name in ("run", "all"):
            p.add_argument("--reps", type=int, default=30, help="timed rounds per point")
            p.add_argument("--warmup", type=int, default=3, help="untimed rounds per point")
            p.add_argument("--timeout-s", type=float, default=420.0, help="budget for all programs")
            p.add_argument(
                "--total-s",
                type=float,
                default=None,
                help="all: budget for build + run (the run gets what is left)",
            )
            p.add_argument("--out", default=None, help="JSON result file")
    args = parser.parse_args(argv)
    started = time.monotonic()
    temp: tempfile.TemporaryDirectory[str] | None = None
    if args.build_dir is None:
        if args.command == "run":
            print("error: run needs --build-dir", file=sys.stderr)
            return 2
        temp = tempfile.TemporaryDirectory(prefix="table-dispatch-")
        args.build_dir = temp.name
    try:
        if args.command in ("build", "all"):
            if args.rows < 1:
                raise UsageError("--rows must be >= 1")
            built = build(args)
            what = f"{len(built.programs)} program(s), {len(built.points)} held-out points"
            print(f"built {what} in {args.build_dir}", file=sys.stderr)
            if args.command == "build":
                return 0
        if args.reps < 1 or args.warmup < 0:
            raise UsageError("--reps must be >= 1 and --warmup >= 0")
        if getattr(args, "total_s", None) is not None:
            left = args.total_s - (time.monotonic() - started) - 20
            if left < 30:
                raise UsageError(f"--total-s {args.total_s}: the build used it up ({left + 20:.0f}s left)")
            args.timeout_s = min(args.timeout_s, left)
        body = run(args)
    except (UsageError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except DeviceMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    finally:
        if temp is not None and args.command != "all":
            temp.cleanup()
    result = {
        "bench": "table_dispatch",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(
            ["python3", "bench/table_dispatch.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "machine": {"platform": platform.platform(), "gpus": device_description(), "cpus": os.cpu_count()},
        "regret": "median(time of the kernel the table dispatched) / median(time of the point's fastest "
        "parity-passing variant) - 1, both timed in the same process, interleaved, CUDA events",
        **body,
        "seconds": round(time.monotonic() - started, 1),
    }
    if temp is not None:
        temp.cleanup()
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(json.dumps({k: result[k] for k in ("regret_on_hardware", "regret_predicted_by_recording",
                                             "recorded_best_regret_on_hardware", "points_with_regret",
                                             "errors")}, indent=1))  # fmt: skip
    return 0 if not body["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
