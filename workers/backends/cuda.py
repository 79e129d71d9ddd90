"""The CUDA backend (sm_90, e.g. the H200): NVRTC compile, driver-API primitives, CUPTI per-dispatch times.

Any package with a ``hip`` (HIP-dialect, portable through kernels/library/include/tb_portability.h)
or ``cuda`` source runs here through the runner (workers/runner.py), decode and prefill alike. Device
time per dispatch is the CUPTI activity record's; CUDA events around every launch are stored beside it
(``event_ns``), and host wall time beside both. cuda-python (``cuda-bindings``) and ``cupti-python`` are
optional imports: without them ``detect()`` returns None and nothing else runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from kernels.arches import get_arch
from kernels.families.base import Variant
from kernels.packages.build import CompileUnit, compile_units
from kernels.packages.loader import package_for
from kernels.packages.package import DeviceFacts, Geometry, KernelPackage
from workers.backends.base import (
    ArtifactInfo,
    DeviceInfo,
    Dispatch,
    ProgressCallback,
    TaskResult,
    TaskSpec,
    UnitCompile,
)
from workers.harness import cuda_driver as cd
from workers.harness.cuda_compile import CompileResult, compile_cubin, sass_census, summarize_census
from workers.harness.interleave import DispatchFn
from workers.profilers import cupti as cupti_profiler
from workers.profilers.cuda_events import EventTimer
from workers.runner import ArgValue, CompiledVariants, Prelaunch, parse_variants, run_task

ARCH = "sm_90"
# loaded cubins kept between tasks of one (resident) process; past this, all are unloaded before the next
# task, so module memory on the GPU stays bounded however many packages and formats a worker serves
MAX_LOADED_MODULES = 256
DEFAULT_SHARED_LIMIT = 48 << 10  # dynamic shared memory a kernel gets without opting in
# sm_90a: the architecture-specific features (wgmma, tb-prefill engine 1) of the one GPU this backend serves
BASE_OPTIONS: tuple[str, ...] = ("--gpu-architecture=sm_90a", "-std=c++17", "-default-device")


@dataclass
class CudaKernel:
    function: Any
    path: str
    symbol: str


class CudaDevice:
    """Runner primitives on the current CUDA context; every buffer is freed by ``free_all``."""

    def __init__(self, ctx: cd.Context, census: dict[str, dict[str, dict[str, int]]]) -> None:
        self.ctx = ctx
        sms = ctx.attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
        self.facts = DeviceFacts("cuda", ARCH, sms, get_arch(ARCH).wave)
        self.llc_bytes = ctx.attribute("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")
        self._owned: list[int] = []
        self._census = census
        self._timer: EventTimer | None = None
        self._launch_log: list[str] = []
        self._event_ns: dict[str, list[int]] = {}
        self._records: list[cupti_profiler.KernelRecord] = []
        self._kernels_per_dispatch: dict[str, int] = {}
        self._span_timed: set[str] = set()  # variants whose dispatch is one graph of overlapping kernels
        self._graphs: list[cd.LaunchGraph] = []

    def alloc(self, nbytes: int) -> int:
        ptr = cd.mem_alloc(max(1, nbytes))
        self._owned.append(ptr)
        return ptr

    def upload(self, array: np.ndarray) -> int:
        ptr = self.alloc(int(array.nbytes))
        cd.htod(ptr, np.ascontiguousarray(array), int(array.nbytes))
        return ptr

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        cd.dtod(dst, src, nbytes)

    def zero(self, ptr: int, nbytes: int) -> None:
        cd.check(cd.driver.cuMemsetD8(ptr, 0, nbytes), "cuMemsetD8")

    def fill_nan_f32(self, ptr: int, count: int) -> None:
        cd.fill_nan_f32(ptr, count)

    def download(self, ptr: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        cd.dtoh(out, ptr, out.nbytes)
        return out

    def launch(self, kernel: Any, geometry: Geometry, args: list[ArgValue]) -> None:
        allow_shared(kernel.function, geometry.shared_bytes)
        cd.launch(kernel.function, geometry.grid, geometry.block, cd.KernelArgs(args), geometry.shared_bytes)
        cd.synchronize()

    def launch_overlapped(
        self, pre: Prelaunch, kernel: Any, geometry: Geometry, args: list[ArgValue]
    ) -> None:
        graph = overlap_graph(launch_steps(kernel, geometry, pre), cd.KernelArgs(args))
        try:
            graph.launch()
            cd.synchronize()
        finally:
            graph.close()

    def dispatcher(
        self,
        name: str,
        kernel: Any,
        geometry: Geometry,
        args_by_copy: list[list[ArgValue]],
        pre: Prelaunch | None = None,
    ) -> DispatchFn:
        """With ``pre.overlap`` the prelaunch kernel and the variant are one graph per weight copy, the
        variant a programmatic dependent launch, timed as the span of the two kernels (pair_times)."""
        packed = [cd.KernelArgs(args) for args in args_by_copy]
        events = self._event_ns.setdefault(name, [])
        log = self._launch_log
        steps = launch_steps(kernel, geometry, pre)
        self._kernels_per_dispatch[name] = len(steps)
        graphs: list[cd.LaunchGraph] = []
        if pre is not None and pre.overlap:
            graphs = [overlap_graph(steps, args) for args in packed]
            self._graphs.extend(graphs)
            self._span_timed.add(name)

        def dispatch(buffer_index: int) -> int:
            timer = self._timer
            assert timer is not None, "dispatch outside timing()"
            timer.start()
            if graphs:
                graphs[buffer_index].launch()
            else:
                for step_kernel, g in steps:
                    cd.launch(step_kernel.function, g.grid, g.block, packed[buffer_index], g.shared_bytes)
            log.extend([name] * len(steps))
            elapsed = timer.stop_ns()
            events.append(elapsed)
            return elapsed

        return dispatch

    @contextmanager
    def timing(self) -> Iterator[None]:
        self._timer = EventTimer()
        trace: cupti_profiler.KernelTrace | None = None
        try:  # the events are destroyed even when CUPTI fails to start (a resident process lives on)
            if cupti_profiler.available():
                started = cupti_profiler.KernelTrace()
                started.start()
                trace = started
            yield
        finally:
            self._records = trace.stop() if trace is not None else []
            self._timer.close()
            self._timer = None

    def attach(self, dispatches: dict[str, list[Dispatch]]) -> dict[str, str]:
        dump = os.environ.get("TUNEBASE_CUPTI_RECORDS")
        if dump and len(self._records) == len(self._launch_log):
            dump_records(Path(dump), self._launch_log, self._records)
        return pair_times(
            dispatches,
            self._launch_log,
            self._records,
            self._event_ns,
            self._kernels_per_dispatch,
            span=self._span_timed,
        )

    def resources(self, kernel: Any, geometry: Geometry) -> dict[str, object]:
        """Registers, shared/local memory (local = spills and stack), occupancy, limiter, SASS census."""
        attr = cd.driver.CUfunction_attribute
        function = kernel.function
        allow_shared(function, geometry.shared_bytes)

        def get(name: str) -> int:
            return int(cd.check(cd.driver.cuFuncGetAttribute(getattr(attr, name), function), name))

        regs = get("CU_FUNC_ATTRIBUTE_NUM_REGS")
        threads = geometry.threads
        static_shared = get("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
        out: dict[str, object] = {
            "registers": regs,
            "shared_static_bytes": static_shared,
            "shared_dynamic_bytes": geometry.shared_bytes,
            "local_bytes": get("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"),
            "const_bytes": get("CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES"),
            "max_threads_per_block": get("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            "ptx_version": get("CU_FUNC_ATTRIBUTE_PTX_VERSION"),
            "binary_version": get("CU_FUNC_ATTRIBUTE_BINARY_VERSION"),
            "block_threads": threads,
        }
        blocks: int | None
        cluster = (
            get("CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH"),
            get("CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT"),
            get("CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH"),
        )
        cluster_size = max(cluster[0], 1) * max(cluster[1], 1) * max(cluster[2], 1)
        try:
            if (
                cluster_size > 1
            ):  # the per-SM query refuses cluster kernels: ask how many clusters fit the GPU
                clusters = max_active_clusters(function, geometry)
                out["cluster_size"], out["clusters_max_active"] = cluster_size, clusters
                sms = self.ctx.attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
                blocks = (
                    clusters * cluster_size // sms
                )  # GPCs whose SM count the cluster does not divide idle some
                out["sms_busy"] = min(clusters * cluster_size, sms)
            else:
                blocks = int(
                    cd.check(
                        cd.driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                            function, threads, geometry.shared_bytes
                        ),
                        "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                    )
                )
        except cd.CudaError as exc:  # a report, not a reason to drop the variant
            blocks = None  # unknown, not 0: a stored 0 reads as "cannot run" (DESIGN §11: nothing unmeasured)
            out["occupancy_error"] = str(exc)[:200]
        max_warps = self.ctx.attribute("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR") // 32
        warps = None if blocks is None else blocks * (threads // 32)
        out["blocks_per_sm"] = blocks
        out["warps_per_sm"] = warps
        out["occupancy"] = round(warps / max_warps, 4) if max_warps and warps is not None else None
        out["limiter"] = limiter(regs, threads, static_shared + geometry.shared_bytes)
        if kernel.path not in self._census:
            self._census[kernel.path] = sass_census(Path(kernel.path))
        sass = self._census[kernel.path].get(kernel.symbol)
        if sass is not None:
            out["sass"] = summarize_census(sass)
        return out

    def free_all(self) -> None:
        """Free every buffer, even past one that fails (a resident process must not keep the rest);
        the first failure is raised after."""
        owned, self._owned = self._owned, []
        self._launch_log.clear()
        self._event_ns.clear()
        self._kernels_per_dispatch.clear()
        self._span_timed.clear()
        graphs, self._graphs = self._graphs, []
        for graph in graphs:
            with suppress(cd.CudaError):
                graph.close()
        failure: cd.CudaError | None = None
        for ptr in owned:
            try:
                cd.mem_free(ptr)
            except cd.CudaError as error:
                failure = failure or error
        if failure is not None:
            raise failure


def max_active_clusters(function: Any, geometry: Geometry) -> int:
    """cuOccupancyMaxActiveClusters for a kernel with a compile-time cluster shape (``__cluster_dims__``): how
    many of its clusters the whole GPU holds at once (a cluster's workgroups must share one GPC)."""
    config = cd.driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = geometry.grid
    config.blockDimX, config.blockDimY, config.blockDimZ = geometry.block
    config.sharedMemBytes = geometry.shared_bytes
    config.numAttrs = 0
    return int(
        cd.check(cd.driver.cuOccupancyMaxActiveClusters(function, config), "cuOccupancyMaxActiveClusters")
    )


@dataclass
class _Module:
    module: Any
    functions: dict[str, Any] = field(default_factory=dict)


class CudaBackend:
    """Compiles packages with NVRTC and runs their tasks through the runner on the pinned GPU."""

    name: str = "cuda"

    def __init__(self, artifact_dir: Path, ordinal: int = 0, options: tuple[str, ...] = BASE_OPTIONS) -> None:
        self.artifact_dir = Path(artifact_dir)
        self.ordinal = ordinal
        self.options = options  # NVRTC options before the unit's defines (a census adds ptxas -v)
        self._ctx: cd.Context | None = None
        self._modules: dict[str, _Module] = {}
        self._census: dict[str, dict[str, dict[str, int]]] = {}

    def _context(self) -> cd.Context:
        if self._ctx is None:
            self._ctx = cd.Context.open(self.ordinal)
        self._ctx.make_current()
        return self._ctx

    @cached_property
    def _device_info(self) -> DeviceInfo | None:
        if not cd.available():
            return None
        try:
            ctx = self._context()
            major = ctx.attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
            minor = ctx.attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
            if (major, minor) != (9, 0):
                return None
            version = ctx.driver_version()
            from workers.harness.cuda_compile import nvrtc_version

            runtime = "; ".join(
                s for s in (nvrtc_version(), cd.package_version(), cupti_profiler.version()) if s
            )
            return DeviceInfo(
                backend="cuda",
                arch=ARCH,
                name=ctx.name(),
                compute_units=ctx.attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
                uuid=ctx.uuid(),
                driver_version=f"cuda-driver {version // 1000}.{version % 1000 // 10}",
                runtime_version=runtime,
            )
        except (cd.CudaError, RuntimeError, OSError):  # no driver library (e.g. a container without the
            return None  # NVIDIA toolkit): no device here, not a crash

    def detect(self) -> DeviceInfo | None:
        """The sm_90 GPU at ``ordinal`` (after CUDA_VISIBLE_DEVICES), or None."""
        return self._device_info

    def supports(self, arch: str, phase: str, format_name: str) -> str | None:
        if get_arch(arch).backend != "cuda":
            return f"cuda backend runs arch {ARCH!r} only, not {arch!r}"
        return None

    # -- compilation ----------------------------------------------------------------

    def compile(
        self, package: KernelPackage, format_name: str, variants: list[Variant]
    ) -> list[tuple[CompileUnit, CompileResult]]:
        """NVRTC (through the cache) every unit; needs no GPU (a bench may warm the cache in parallel)."""
        out = []
        prepare = package.manifest.prepare
        for index, unit in enumerate(compile_units(package, format_name, "cuda", variants)):
            defines = [f"-D{key}={value}" for key, value in sorted(unit.defines.items())]
            names = set(unit.symbols(package).values())
            names |= set(unit.prelaunch_symbols(package, "cuda").values())
            if prepare is not None and index == 0:
                names.add(prepare.symbol)
            result = compile_cubin(
                unit.source,
                self.artifact_dir,
                f"{package.name}_{format_name.lower()}_{index}",
                [*self.options, *defines],
                sorted(names),
            )
            out.append((unit, result))
        return out

    def precompile(
        self, package: KernelPackage, arch: str, format_name: str, variants: list[Variant]
    ) -> list[UnitCompile]:
        """The compile queue's work: the units ``build`` will need, into the shared cache, no GPU."""
        out = []
        for unit, r in self.compile(package, format_name, variants):
            log = "" if r.ok else r.log
            out.append(UnitCompile(Path(r.path).name, r.cache_key, len(unit.variants), r.ok, r.compiled,
                                   r.seconds, r.waited_s, log))  # fmt: skip
        return out

    def build(self, package: KernelPackage, format_name: str, variants: list[Variant]) -> CompiledVariants:
        """NVRTC (through the cache) every unit; load each variant's function; failures per variant."""
        units = self.compile(package, format_name, variants)
        artifact = ArtifactInfo("", "", package.version, "", self.options, False)
        compiled = CompiledVariants(artifact)
        keys, logs = [], []
        prepare = package.manifest.prepare
        for index, (unit, result) in enumerate(units):
            symbols = unit.symbols(package)
            pre_symbols = unit.prelaunch_symbols(package, "cuda")
            if prepare is not None and index == 0 and result.ok:
                lowered = result.symbols.get(prepare.symbol, prepare.symbol)
                try:
                    compiled.prepare = CudaKernel(self._function(result.path, lowered), result.path, lowered)
                except cd.CudaError as exc:
                    logs.append(f"prepare kernel {prepare.symbol}: {exc}")
            keys.append(result.cache_key)
            artifact.toolchain = result.toolchain
            artifact.compiled |= result.compiled
            artifact.path = artifact.path or result.path
            if result.log:
                logs.append(result.log)
            for name, expression in symbols.items():
                lowered = result.symbols.get(expression, expression)
                compiled.symbols[name] = lowered
                artifact.resources.setdefault(lowered, {})
                if not result.ok:
                    compiled.errors[name] = f"compile failed: {result.log}"
                    continue
                try:
                    compiled.kernels[name] = CudaKernel(
                        self._function(result.path, lowered), result.path, lowered
                    )
                    if name in pre_symbols:
                        pre = result.symbols.get(pre_symbols[name], pre_symbols[name])
                        function = self._function(result.path, pre)
                        compiled.prelaunch[name] = CudaKernel(function, result.path, pre)
                except cd.CudaError as exc:
                    compiled.errors[name] = f"load failed: {exc}"
        artifact.cache_key = _combined(keys)
        artifact.ok = bool(units) and not compiled.errors
        artifact.log = "\n".join(logs) or (
            "" if units else f"package {package.name} has no hip or cuda source"
        )
        if not units:
            for variant in variants:
                compiled.errors[variant.name] = artifact.log
        return compiled

    def _function(self, path: str, symbol: str) -> Any:
        mod = self._modules.get(path)
        if mod is None:
            data = np.frombuffer(Path(path).read_bytes(), dtype=np.uint8).copy()
            module = cd.check(cd.driver.cuModuleLoadData(data.ctypes.data), f"cuModuleLoadData({path})")
            mod = self._modules[path] = _Module(module)
        fn = mod.functions.get(symbol)
        if fn is None:
            fn = cd.check(
                cd.driver.cuModuleGetFunction(mod.module, symbol.encode()), f"cuModuleGetFunction({symbol})"
            )
            mod.functions[symbol] = fn
        return fn

    # -- the task -----------------------------------------------------------------

    def run_task(self, spec: TaskSpec, progress: ProgressCallback | None = None) -> TaskResult:
        """Compile, check parity of, and time every variant of one task, interleaved (the runner)."""
        reason = self.supports(spec.arch, spec.phase, spec.format)
        if reason is not None:
            raise ValueError(reason)
        device = self.detect()
        if device is None:
            raise RuntimeError(cd.IMPORT_ERROR or "no sm_90 GPU detected")
        package = package_for(spec.phase, spec.kernel_root, spec.kernel)
        ctx = self._context()
        if len(self._modules) > MAX_LOADED_MODULES:  # between tasks: no function of them is in use
            self._unload_modules()
        variants, _rejected = parse_variants(package, spec, "cuda")  # the runner reports the rejected
        compiled = self.build(package, spec.format, variants)
        return run_task(package, spec, CudaDevice(ctx, self._census), device, compiled, progress)

    def reusable(self) -> bool:
        """False once the context holds a sticky error (illegal address, trap, launch failure): every
        later call in this process would fail, so the resident watchdog child is replaced."""
        if self._ctx is None:
            return True
        try:
            self._ctx.make_current()
            cd.synchronize()
        except cd.CudaError:
            return False
        return True

    def close(self) -> None:
        self._unload_modules()

    def _unload_modules(self) -> None:
        modules, self._modules = self._modules, {}
        self._census.clear()
        for mod in modules.values():
            with suppress(cd.CudaError):
                cd.check(cd.driver.cuModuleUnload(mod.module), "cuModuleUnload")


def dump_records(path: Path, launch_log: list[str], records: list[cupti_profiler.KernelRecord]) -> None:
    """Append every CUPTI kernel record of a timing session, with the variant it was paired with, as JSON
    lines (TUNEBASE_CUPTI_RECORDS=path): how the kernels of an overlapped dispatch really lay in time."""
    with path.open("a") as out:
        for name, record in zip(launch_log, records, strict=True):
            row = {
                "variant": name,
                "kernel": record.name,
                "start_ns": record.start_ns,
                "end_ns": record.end_ns,
            }
            out.write(json.dumps(row) + "\n")


def launch_steps(kernel: Any, geometry: Geometry, pre: Prelaunch | None) -> list[tuple[Any, Geometry]]:
    """The kernels one dispatch launches, in order (the prelaunch kernel first), opted in to the shared
    memory they ask."""
    steps = [(kernel, geometry)] if pre is None else [(pre.kernel, pre.geometry), (kernel, geometry)]
    for step_kernel, step_geometry in steps:
        allow_shared(step_kernel.function, step_geometry.shared_bytes)
    return steps


def overlap_graph(steps: list[tuple[Any, Geometry]], args: cd.KernelArgs) -> cd.LaunchGraph:
    """The launches of one dispatch as a graph, each after the first a programmatic dependent launch."""
    return cd.LaunchGraph(
        [
            cd.GraphStep(k.function, g.grid, g.block, g.shared_bytes, dependent=index > 0)
            for index, (k, g) in enumerate(steps)
        ],
        args,
    )


def allow_shared(function: Any, shared_bytes: int) -> None:
    """Opt a kernel in to more than 48 KiB of dynamic shared memory (sm_90 allows up to 227 KiB per
    block); without it such a launch fails. Idempotent, so every launch path may call it."""
    if shared_bytes <= DEFAULT_SHARED_LIMIT:
        return
    attr = cd.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    cd.check(cd.driver.cuFuncSetAttribute(function, attr, shared_bytes), "cuFuncSetAttribute")


def pair_times(
    dispatches: dict[str, list[Dispatch]],
    launch_log: list[str],
    records: list[cupti_profiler.KernelRecord],
    event_ns: dict[str, list[int]],
    kernels_per_dispatch: dict[str, int] | None = None,
    span: set[str] | frozenset[str] = frozenset(),
) -> dict[str, str]:
    """device_ns := CUPTI kernel duration (paired with launches in order), event_ns := event time.

    A variant with a prelaunch kernel logs two launches per dispatch (``kernels_per_dispatch``): its
    device time is the sum of both records, or, for the variants in ``span`` (launched as one graph whose
    kernels may overlap), the first start to the last end. Returns, per variant, which clock device_ns
    came from:
    'cupti', or 'cuda-events' when CUPTI is missing or its record count does not match the launches
    (then it is not trusted).
    """
    per_kernel: dict[str, list[cupti_profiler.KernelRecord]] = {name: [] for name in event_ns}
    cupti_ok = bool(records) and len(records) == len(launch_log)
    if cupti_ok:
        for name, record in zip(launch_log, records, strict=True):
            per_kernel.setdefault(name, []).append(record)
    per_variant: dict[str, list[int]] = {}
    for name, kernels in per_kernel.items():
        step = max(1, (kernels_per_dispatch or {}).get(name, 1))
        if len(kernels) % step:
            per_variant[name] = []  # a partial dispatch: do not trust the pairing
            continue
        groups = [kernels[i : i + step] for i in range(0, len(kernels), step)]
        if name in span:
            per_variant[name] = [max(r.end_ns for r in g) - min(r.start_ns for r in g) for g in groups]
        else:
            per_variant[name] = [sum(r.duration_ns for r in g) for g in groups]
    clocks: dict[str, str] = {}
    for name, rows in dispatches.items():
        if not rows:
            continue
        events = event_ns.get(name, [])[-len(rows) :]
        durations = per_variant.get(name, [])[-len(rows) :] if cupti_ok else []
        for i, row in enumerate(rows):
            row.event_ns = events[i] if len(events) == len(rows) else row.device_ns
            if len(durations) == len(rows):
                row.device_ns = durations[i]
        clocks[name] = "cupti" if len(durations) == len(rows) else "cuda-events"
    return clocks


def _combined(keys: list[str]) -> str:
    import hashlib

    return hashlib.sha256("".join(keys).encode()).hexdigest() if keys else ""


def limiter(regs: int, block_threads: int, shared_bytes: int) -> str:
    """Which resource caps blocks per SM (sm_90: 64K registers, 228 KB shared, 64 warps, 32 blocks)."""
    warps = max(1, block_threads // 32)
    by_regs = 65536 // max(1, regs * 32 * warps) if regs else 32
    by_warps = 64 // warps
    by_shared = (233472 // shared_bytes) if shared_bytes else 32
    caps = {"registers": by_regs, "warps": by_warps, "shared": by_shared, "blocks": 32}
    return min(caps, key=lambda key: caps[key])
