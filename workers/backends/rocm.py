"""The ROCm backend (gfx906, gfx90a, gfx942, gfx950): compile, ISA resources, profiled timing harness.

Compile: hipcc (gfx906/gfx90a) or ziglang's clang 22 (gfx942/gfx950) through the content-addressed
cache of workers/compilers (a second run compiles nothing); hiprtc through hip-python when neither
is installed but a ROCm runtime is. One unit per (family, format kind, arch) holds every variant;
when it fails to build, each variant is built alone so a compile error stays with its variant.

Timing: one harness subprocess per task (workers/harness/hip_runner.py) under rocprofv3
(``--kernel-trace --output-format csv``) or legacy rocprof (``--stats --timestamp on``), whichever
exists, with a watchdog. A crash or hang kills only the harness: the variant it was working on is
marked failed and the harness runs again without it. Profiler rows are mapped back to variants by
symbol and order (workers/profilers/rocprof_mapping.py); profiler time is Dispatch.device_ns, the
hipEvent time and host wall time are kept beside it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernels.arches import arches_for_backend
from kernels.families.base import Variant
from kernels.packages.build import CompileUnit, compile_units
from kernels.packages.loader import package_for
from kernels.packages.package import KernelPackage
from workers.backends.base import (
    ArtifactInfo,
    DeviceInfo,
    Dispatch,
    Parity,
    ProgressCallback,
    TaskResult,
    TaskSpec,
    UnitCompile,
    VariantResult,
)
from workers.compilers import compiler_for_arch
from workers.compilers.base import Compiler
from workers.compilers.cache import CompileCache
from workers.compilers.codeobject import kernel_symbols
from workers.harness.racing import timed_rounds
from workers.profilers.rocprof_detect import parse_capture
from workers.profilers.rocprof_mapping import map_dispatches
from workers.runner import parse_variants

ARCHES: tuple[str, ...] = arches_for_backend("rocm")
RUNNER_MODULE = "workers.harness.hip_runner"
PROBE_TIMEOUT_S = 60
DEFAULT_WATCHDOG_S = 900
MAX_LOG_CHARS = 64_000


# -- profilers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profiler:
    kind: str  # "rocprofv3" | "rocprof"
    path: str


def find_profiler() -> Profiler | None:
    """rocprofv3 (ROCm >= 6.2) when present, else legacy rocprof (older ROCm, e.g. on MI50), else None."""
    for kind in ("rocprofv3", "rocprof"):
        path = shutil.which(kind)
        if path:
            return Profiler(kind, path)
    return None


def harness_argv(python: str, task_path: Path) -> list[str]:
    return [python, "-m", RUNNER_MODULE, str(task_path)]


def profiled_argv(profiler: Profiler | None, out_dir: Path, inner: list[str]) -> list[str]:
    """The exact command line that runs the harness under the profiler."""
    if profiler is None:
        return list(inner)
    if profiler.kind == "rocprofv3":
        return [profiler.path, "--kernel-trace", "--output-format", "csv", "-d", str(out_dir), "--", *inner]
    if profiler.kind == "rocprof":
        return [profiler.path, "--stats", "--timestamp", "on", "-o", str(out_dir / "results.csv"), *inner]
    raise ValueError(f"unknown profiler kind {profiler.kind!r}")


def capture_files(profiler: Profiler, out_dir: Path) -> list[Path]:
    """The per-dispatch file(s) the profiler wrote (rocprofv3 nests them under host/pid folders)."""
    if profiler.kind == "rocprofv3":
        return sorted(out_dir.rglob("*kernel_trace.csv"))
    path = out_dir / "results.csv"
    return [path] if path.is_file() else []


# -- compile --------------------------------------------------------------------------------------


class HiprtcCompiler:
    """hiprtc through hip-python (``from hip import hiprtc``): for ROCm hosts without a static toolchain."""

    name = "hiprtc"
    arches: frozenset[str] = frozenset(ARCHES)

    def available(self) -> bool:
        try:
            from hip import hiprtc  # noqa: F401
        except ImportError:
            return False
        return True

    def identity(self) -> str:
        from hip import hiprtc

        _err, major, minor = hiprtc.hiprtcVersion()
        return f"hiprtc {major}.{minor}"

    def flags(self, arch: str) -> tuple[str, ...]:
        return (f"--offload-arch={arch}", "-O3", "-std=c++17")

    def compile(self, source: Path, arch: str, defines: dict[str, str], out_path: Path) -> Any:
        from hip import hiprtc

        from workers.compilers.base import INCLUDE_DIR, CompileResult, define_flags

        options = [
            o.encode()
            for o in (*self.flags(arch), f"-I{source.parent}", f"-I{INCLUDE_DIR}", *define_flags(defines))
        ]
        err, prog = hiprtc.hiprtcCreateProgram(source.read_bytes(), source.name.encode(), 0, [], [])
        if err != hiprtc.hiprtcResult.HIPRTC_SUCCESS:
            return CompileResult(False, f"hiprtcCreateProgram: {err}", None)
        (err,) = hiprtc.hiprtcCompileProgram(prog, len(options), options)
        _, log_size = hiprtc.hiprtcGetProgramLogSize(prog)
        log = bytearray(log_size)
        hiprtc.hiprtcGetProgramLog(prog, log)
        text = bytes(log).rstrip(b"\0").decode(errors="replace")
        if err != hiprtc.hiprtcResult.HIPRTC_SUCCESS:
            return CompileResult(False, text or str(err), None)
        _, size = hiprtc.hiprtcGetCodeSize(prog)
        code = bytearray(size)
        hiprtc.hiprtcGetCode(prog, code)
        out_path.write_bytes(bytes(code))
        return CompileResult(True, text, out_path)


def choose_compiler(arch: str) -> Compiler:
    """The static driver of the arch when installed, else hiprtc when hip-python is, else the static one."""
    static = compiler_for_arch(arch)
    available = getattr(static, "available", None)
    if callable(available) and not available():
        rtc = HiprtcCompiler()
        if rtc.available():
            return rtc
    return static


@dataclass
class VariantBuild:
    variant: str
    symbol: str
    path: str | None
    error: str | None = None
    prelaunch: str | None = None  # symbol of the package's [prelaunch] kernel in the same code object


@dataclass
class BuildResult:
    artifact: ArtifactInfo
    variants: dict[str, VariantBuild] = field(default_factory=dict)


def isa_resources(path: Path) -> dict[str, dict[str, Any]]:
    """Per kernel symbol: the `tunebase isa` record, cached beside the code object."""
    sidecar = path.with_name(path.name + ".isa.json")
    if sidecar.is_file():
        cached: dict[str, dict[str, Any]] = json.loads(sidecar.read_text())
        return cached
    from workers.isa.analyze import analyze_file

    out: dict[str, dict[str, Any]] = {}
    for report in analyze_file(path):
        out[str(report.get("symbol") or report["name"]).removesuffix(".kd")] = report
    tmp = sidecar.with_name(sidecar.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(out))
    tmp.replace(sidecar)
    return out


# -- the backend ----------------------------------------------------------------------------------


class RocmBackend:
    """Compiles, launches (in a profiled subprocess) and times HIP kernels on one pinned AMD GPU."""

    name: str = "rocm"

    def __init__(
        self,
        artifact_dir: Path,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
        profiler: Profiler | str | None = "auto",
        watchdog_s: float = DEFAULT_WATCHDOG_S,
        ordinal: int = 0,
    ) -> None:
        self.artifact_dir = Path(artifact_dir)
        self.cache = CompileCache(self.artifact_dir / "rocm")
        self.python = python
        self.env = env
        self._profiler = profiler
        self.watchdog_s = watchdog_s
        self.ordinal = ordinal
        self._device: DeviceInfo | str | None = "unprobed"

    @property
    def profiler(self) -> Profiler | None:
        return find_profiler() if self._profiler == "auto" else self._profiler  # type: ignore[return-value]

    def _env(self) -> dict[str, str]:
        return dict(self.env if self.env is not None else os.environ)

    # identity

    def detect(self) -> DeviceInfo | None:
        """Device properties from a probe subprocess (the runtime never initialises in the worker)."""
        if self._device == "unprobed":
            self._device = self._probe()
        return self._device if isinstance(self._device, DeviceInfo) else None

    def _probe(self) -> DeviceInfo | None:
        argv = [self.python, "-m", RUNNER_MODULE, "--probe", str(self.ordinal)]
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=self._env(), check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if proc.returncode != 0:
            return None
        try:
            props = json.loads(proc.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            return None
        if props.get("arch") not in ARCHES:
            return None
        return DeviceInfo(
            backend="rocm",
            arch=props["arch"],
            name=props["name"],
            compute_units=int(props["compute_units"]),
            uuid=props["uuid"],
            driver_version=props["driver_version"],
            runtime_version=props["runtime_version"],
        )

    def supports(self, arch: str, phase: str, format_name: str) -> str | None:
        if arch not in ARCHES:
            return f"rocm backend runs {', '.join(ARCHES)}, not {arch!r}"
        return None

    # compile

    def _compile(self, package: KernelPackage, unit: CompileUnit, arch: str) -> Any:
        return self.cache.get_or_compile(
            choose_compiler(arch), unit.source, package.name, package.version[:16], arch, unit.defines
        )

    def precompile(
        self, package: KernelPackage, arch: str, format_name: str, variants: list[Variant]
    ) -> list[UnitCompile]:
        """The compile queue's work: the units ``build`` compiles first, into the shared cache, no GPU
        (a unit that fails is left to ``build``, which splits it per variant)."""
        out = []
        for unit in compile_units(package, format_name, "rocm", variants):
            started = time.monotonic()
            done = self._compile(package, unit, arch)
            seconds = round(time.monotonic() - started, 3) if done.compiled else 0.0
            name = done.result.path.name if done.result.path is not None else unit.source.name
            ok = done.result.ok and done.result.path is not None
            out.append(UnitCompile(name, done.key, len(unit.variants), ok, done.compiled, seconds,
                                   log="" if ok else done.result.log[-4000:]))  # fmt: skip
        return out

    def build(
        self, package: KernelPackage, arch: str, format_name: str, variants: list[Variant]
    ) -> BuildResult:
        """Code objects for the task's variants (cached); compile errors land on their variants only.

        When a unit holding several variants fails, each variant is compiled alone, so one broken variant
        does not take the others down (its compiler message is its error).
        """
        compiler = choose_compiler(arch)
        builds: dict[str, VariantBuild] = {}
        logs: list[str] = []
        keys: list[str] = []
        compiled = False
        for unit in compile_units(package, format_name, "rocm", variants):
            done = self._compile(package, unit, arch)
            keys.append(done.key)
            compiled = compiled or done.compiled
            logs.append(done.result.log)
            pieces = [(unit, done)]
            if not (done.result.ok and done.result.path is not None) and len(unit.variants) > 1:
                pieces = []
                for variant in unit.variants:
                    alone = compile_units(package, format_name, "rocm", [variant])[0]
                    one = self._compile(package, alone, arch)
                    keys.append(one.key)
                    compiled = compiled or one.compiled
                    pieces.append((alone, one))
            for piece, result in pieces:
                ok = result.result.ok and result.result.path is not None
                symbols = kernel_symbols(result.result.path) if ok else set()
                pre_symbols = piece.prelaunch_symbols(package, "rocm")
                for variant in piece.variants:
                    symbol = package.symbol(variant)
                    pre = pre_symbols.get(variant.name)
                    missing = [s for s in (symbol, pre) if s is not None and s not in symbols]
                    if not ok:
                        error = "compile failed:\n" + result.result.log[-4000:]
                    elif missing:
                        listed = ", ".join(sorted(symbols)[:8])
                        error = f"{missing[0]} not in the code object (symbols: {listed})"
                    else:
                        error = None
                    path = str(result.result.path) if error is None else None
                    builds[variant.name] = VariantBuild(variant.name, symbol, path, error, pre)
        resources: dict[str, dict[str, object]] = {}
        for b in builds.values():
            if b.path is None:
                continue
            try:
                report = isa_resources(Path(b.path)).get(b.symbol)
            except Exception as exc:  # ISA analysis must never fail a task
                report = {"error": f"{type(exc).__name__}: {exc}"}
            resources[b.symbol] = {**(report or {}), "code_object": b.path, "variant": b.variant}
        key = keys[0] if len(keys) == 1 else hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()
        first = next((b.path for b in builds.values() if b.path), "")
        artifact = ArtifactInfo(
            cache_key=key,
            path=first or "",
            source_hash=package.version,
            toolchain=compiler.identity(),
            flags=tuple(compiler.flags(arch)),
            compiled=compiled,
            ok=all(b.error is None for b in builds.values()),
            log="\n".join(x for x in logs if x)[-MAX_LOG_CHARS:],
            resources=resources,
        )
        return BuildResult(artifact, builds)

    # run

    def run_task(self, spec: TaskSpec, progress: ProgressCallback | None = None) -> TaskResult:
        reason = self.supports(spec.arch, spec.phase, spec.format)
        if reason:
            raise ValueError(reason)
        device = self.detect()
        if device is None:
            raise RuntimeError(
                "no ROCm device: the HIP probe found no gfx9 GPU (hip-python and a ROCm runtime)"
            )
        if device.arch != spec.arch:
            raise RuntimeError(f"task is for {spec.arch} but this worker's GPU is {device.arch}")
        package = package_for(spec.phase, spec.kernel_root, spec.kernel)
        variants, rejected = parse_variants(package, spec, "rocm")
        failed: dict[str, str] = {name: str(r.error) for name, r in rejected.items()}
        built = self.build(package, spec.arch, spec.format, variants)
        failed.update({n: b.error for n, b in built.variants.items() if b.error})
        runnable = [b for b in built.variants.values() if b.error is None]
        rounds = timed_rounds(spec)
        if progress is not None:
            progress(0, rounds * len(runnable))
        outcome = self.time_variants(spec, runnable, rounds)
        failed.update(outcome.errors)
        results: list[VariantResult] = []
        for name in spec.variants:
            b = built.variants.get(name) or VariantBuild(name, "", None, failed.get(name))
            data = outcome.variants.get(name)
            parity = Parity(**data["parity"]) if data and data.get("parity") else None
            results.append(
                VariantResult(
                    variant=name,
                    dispatches=outcome.dispatches.get(name, []) if name not in failed else [],
                    parity=parity,
                    error=failed.get(name) or (data or {}).get("error"),
                    symbol=b.symbol,
                )
            )
        if progress is not None:
            progress(sum(len(r.dispatches) for r in results), rounds * len(runnable))
        return TaskResult(device, built.artifact, results, weight_copies=outcome.weight_copies)

    def time_variants(self, spec: TaskSpec, builds: list[VariantBuild], rounds: int) -> HarnessOutcome:
        """Run the harness until every variant is timed or marked failed (one retry per culprit)."""
        outcome = HarnessOutcome()
        remaining = list(builds)
        with tempfile.TemporaryDirectory(prefix="tb-rocm-") as tmp:
            attempt = 0
            while remaining:
                workdir = Path(tmp) / f"attempt{attempt}"
                attempt += 1
                run = self.run_harness(spec, remaining, rounds, workdir)
                if run.result is not None:
                    outcome.absorb(run.result, self.profiler_times(run, run.result))
                    return outcome
                culprit = run.culprit
                if culprit is None or culprit not in {b.variant for b in remaining}:
                    for b in remaining:
                        outcome.errors[b.variant] = run.failure
                    return outcome
                outcome.errors[culprit] = run.failure
                remaining = [b for b in remaining if b.variant != culprit]
        return outcome

    def task_document(
        self, spec: TaskSpec, builds: list[VariantBuild], rounds: int, workdir: Path
    ) -> dict[str, Any]:
        return {
            "spec": {key: value for key, value in asdict(spec).items() if key != "variants"},
            "rounds": rounds, "ordinal": self.ordinal, "workdir": str(workdir),
            "variants": [
                {"name": b.variant, "symbol": b.symbol, "path": b.path, "prelaunch": b.prelaunch}
                for b in builds
            ],
            "prepare": self.prepare_entry(spec, builds),
        }  # fmt: skip

    @staticmethod
    def prepare_entry(spec: TaskSpec, builds: list[VariantBuild]) -> dict[str, str] | None:
        """The package's [prepare] kernel: a symbol in the same code objects as the variants."""
        prepare = package_for(spec.phase, spec.kernel_root, spec.kernel).manifest.prepare
        path = next((b.path for b in builds if b.path), None)
        return None if prepare is None or path is None else {"symbol": prepare.symbol, "path": path}

    def run_harness(
        self, spec: TaskSpec, builds: list[VariantBuild], rounds: int, workdir: Path
    ) -> HarnessRun:
        """One harness process (under the profiler), killed with its process group past the watchdog."""
        workdir.mkdir(parents=True)
        task_path = workdir / "task.json"
        task_path.write_text(json.dumps(self.task_document(spec, builds, rounds, workdir)))
        profiler = self.profiler
        out_dir = workdir / "profile"
        out_dir.mkdir()
        argv = profiled_argv(profiler, out_dir, harness_argv(self.python, task_path))
        log_path = workdir / "harness.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=self._env(), start_new_session=True
            )
            try:
                rc = proc.wait(timeout=self.watchdog_s)
                hung = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the profiler and the harness it started
                rc = proc.wait()
                hung = True
        run = HarnessRun(argv=argv, workdir=workdir, profiler=profiler, returncode=rc)
        result_path = workdir / "result.json"
        if not hung and rc == 0 and result_path.is_file():
            run.result = json.loads(result_path.read_text())
            return run
        last = _last_progress(workdir / "progress.jsonl")
        run.culprit = last.get("variant")
        tail = log_path.read_text(errors="replace")[-2000:]
        what = f"hung (killed after {self.watchdog_s:g} s)" if hung else f"crashed (exit status {rc})"
        where = (
            f" during {last.get('stage')} of {run.culprit}"
            if run.culprit
            else f" at stage {last.get('stage')}"
        )
        run.failure = f"harness {what}{where}\n{tail}".strip()
        return run

    def profiler_times(self, run: HarnessRun, result: dict[str, Any]) -> dict[str, list[int]] | str | None:
        """Per variant, profiler ns of each timed launch; None: no profiler; a str says why not."""
        if run.profiler is None:
            return None
        files = capture_files(run.profiler, run.workdir / "profile")
        if not files:
            return f"{run.profiler.kind} wrote no capture under {run.workdir / 'profile'}"
        rows = []
        for path in files:
            rows.extend(parse_capture(path.read_text(), path.name).dispatches)
        return times_from_capture(rows, result["launches"])


def times_from_capture(rows: list[Any], launches: list[dict[str, Any]]) -> dict[str, list[int]] | str:
    """Profiler duration of every *timed* launch, per variant in launch order (or why it cannot be mapped)."""
    try:
        mapped = map_dispatches(rows, [(entry["variant"], entry["symbol"]) for entry in launches])
    except ValueError as error:
        return f"profiler rows do not match the launch log: {error}"
    out: dict[str, list[int]] = {}
    cursor: dict[str, int] = {}
    last: dict[str, object] = {}  # the dispatch id of each variant's previous timed launch
    for index, entry in enumerate(launches):
        name = entry["variant"]
        position = cursor.get(name, 0)
        cursor[name] = position + 1
        if entry["stage"] != "timed":
            continue
        ns = mapped[name][position].duration_ns
        dispatch = entry.get("dispatch", ("launch", index))  # a prelaunch and its kernel share one id
        if name in last and last[name] == dispatch:
            out[name][-1] += ns  # the same dispatch: both kernels' times add up
        else:
            out.setdefault(name, []).append(ns)
        last[name] = dispatch
    return out


@dataclass
class HarnessRun:
    argv: list[str]
    workdir: Path
    profiler: Profiler | None
    returncode: int
    result: dict[str, Any] | None = None
    culprit: str | None = None
    failure: str = ""


@dataclass
class HarnessOutcome:
    dispatches: dict[str, list[Dispatch]] = field(default_factory=dict)
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    weight_copies: int = 1

    def absorb(self, result: dict[str, Any], profiled: dict[str, list[int]] | str | None) -> None:
        """Harness result + profiler times → Dispatch rows (profiler ns, event ns, wall ns)."""
        self.weight_copies = int(result.get("weight_copies", 1))
        self.variants = result["variants"]
        for name, data in result["variants"].items():
            if data.get("error"):
                self.errors.setdefault(name, data["error"])
            rows = data.get("dispatches", [])
            if isinstance(profiled, str):
                if rows:
                    self.errors.setdefault(name, profiled)
                continue
            device = profiled.get(name, []) if profiled is not None else [int(r["device_ns"]) for r in rows]
            if len(device) != len(rows):
                self.errors.setdefault(name, f"{len(device)} profiler rows for {len(rows)} timed dispatches")
                continue
            self.dispatches[name] = [
                Dispatch(
                    seq=int(r["seq"]),
                    device_ns=int(ns),
                    wall_ns=int(r["wall_ns"]),
                    buffer_index=int(r["buffer_index"]),
                    event_ns=int(r["device_ns"]),  # the harness's hipEvent time
                )
                for r, ns in zip(rows, device, strict=True)
            ]


def _last_progress(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {"stage": "start"}
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    try:
        return dict(json.loads(lines[-1])) if lines else {"stage": "start"}
    except json.JSONDecodeError:
        return {"stage": "unknown"}
