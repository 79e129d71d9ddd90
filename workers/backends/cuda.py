"""The CUDA backend (sm_90): NVRTC-compiled HIP-dialect kernels launched through cuda-python.

Per task: one cubin per (format, variant list) from the content-addressed cache;
weights packed to the kernel layout and rotated over enough device copies to
exceed twice the L2; every variant's output NaN-filled before its parity run;
warm-up; interleaved timed dispatches (workers/harness/interleave.py). Device
time per dispatch is CUPTI's kernel duration; CUDA-event time and host wall
time are stored beside it (DESIGN §5.1). cuda-python and cupti-python are
optional imports: without them ``detect()`` returns None and nothing else runs.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from kernels.families.base import InvalidVariant, Variant
from kernels.families.decode import DecodeFamily
from kernels.reference import Problem, Tolerance, build_problem, sample_rows
from workers.backends.base import (
    ArtifactInfo,
    DeviceInfo,
    Dispatch,
    Parity,
    ProgressCallback,
    TaskResult,
    TaskSpec,
    VariantResult,
)
from workers.harness import cuda_driver as cd
from workers.harness.cuda_abi import Buffers, Geometry, KernelBinding, default_binding, weight_arrays
from workers.harness.cuda_compile import compile_cubin, sass_census, summarize_census
from workers.harness.interleave import DispatchFn, interleave_task
from workers.profilers import cupti as cupti_profiler
from workers.profilers.cuda_events import EventTimer

ARCH = "sm_90"
MAX_WEIGHT_COPIES = 256
MAX_ROTATION_BYTES = 8 << 30
PARITY_SAMPLE_ABOVE = 1 << 26  # weights; above this the reference covers a row sample only
PARITY_SAMPLE_ROWS = 512
POOL_CACHE_BYTES = 48 << 30  # device memory kept for packed weights across tasks (M = 1..4 reuse them)
MAX_M = 4


def weight_copies(copy_bytes: int, l2_bytes: int, warm_cache: bool) -> int:
    """Copies whose total exceeds twice the L2, capped by count and memory."""
    if warm_cache or copy_bytes <= 0:
        return 1
    wanted = math.floor(2 * l2_bytes / copy_bytes) + 1
    by_memory = max(1, MAX_ROTATION_BYTES // copy_bytes)
    return max(1, min(wanted, MAX_WEIGHT_COPIES, by_memory))


@dataclass
class _Pool:
    """Packed weights on the device: ``copies`` identical copies of every kernel-layout array."""

    ptrs: list[list[int]]  # [copy][array]
    nbytes: int
    x: np.ndarray  # float32 (MAX_M, k) activations; task M uses the first M rows
    expected: np.ndarray  # float32 (MAX_M, rows or n)
    rows: np.ndarray | None
    format: Any = None
    freed: bool = False

    def free(self) -> None:
        if not self.freed:
            for copy in self.ptrs:
                for ptr in copy:
                    cd.mem_free(ptr)
            self.freed = True


@dataclass
class _Module:
    module: Any
    functions: dict[str, Any] = field(default_factory=dict)


class CudaBackend:
    """Compiles, launches and times decode kernels on the one GPU this process is pinned to."""

    name: str = "cuda"

    def __init__(self, artifact_dir: Path, binding: KernelBinding | None = None, ordinal: int = 0) -> None:
        self.artifact_dir = Path(artifact_dir)
        self.binding = binding or default_binding()
        self.ordinal = ordinal
        self.family = DecodeFamily()
        self._ctx: cd.Context | None = None
        self._modules: dict[str, _Module] = {}
        self._pools: OrderedDict[tuple[str, int, int, int, bool], _Pool] = OrderedDict()
        self._census: dict[str, dict[str, dict[str, int]]] = {}

    # -- identity -----------------------------------------------------------------

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
        except cd.CudaError:
            return None

    def detect(self) -> DeviceInfo | None:
        """The sm_90 GPU at ``ordinal`` (after CUDA_VISIBLE_DEVICES), or None."""
        return self._device_info

    def supports(self, arch: str, phase: str, format_name: str) -> str | None:
        if arch != ARCH:
            return f"cuda backend runs arch {ARCH!r} only, not {arch!r}"
        if phase != "decode":
            return f"cuda backend has no {phase!r} kernels yet (decode only)"
        if format_name not in self.binding.formats():
            return (
                f"cuda backend has no {format_name} kernel (supported: {', '.join(self.binding.formats())})"
            )
        return None

    # -- compilation ----------------------------------------------------------------

    def build(self, format_name: str, variants: list[Variant]) -> tuple[ArtifactInfo, dict[str, str]]:
        """Compile (or reuse) the cubin with every variant; returns the artifact and variant -> symbol."""
        exprs = {v.name: self.binding.symbol(v) for v in variants}
        options = self.binding.options(format_name)
        stem = "decode_" + "_".join(o.split("=", 1)[1].lower() for o in options if o.startswith("-DTB_"))
        result = compile_cubin(
            self.binding.source_path,
            self.artifact_dir,
            stem.rstrip("_") or "decode",
            options,
            sorted(set(exprs.values())),
        )
        info = ArtifactInfo(
            cache_key=result.cache_key,
            path=result.path,
            source_hash=result.source_hash,
            toolchain=result.toolchain,
            flags=result.options,
            compiled=result.compiled,
            ok=result.ok,
            log=result.log,
        )
        symbols = {name: result.symbols.get(expr, "") for name, expr in exprs.items()}
        return info, symbols

    def _function(self, path: str, symbol: str) -> Any:
        mod = self._modules.get(path)
        if mod is None:
            data = Path(path).read_bytes()
            buf = np.frombuffer(data, dtype=np.uint8).copy()
            module = cd.check(cd.driver.cuModuleLoadData(buf.ctypes.data), f"cuModuleLoadData({path})")
            mod = self._modules[path] = _Module(module)
        fn = mod.functions.get(symbol)
        if fn is None:
            fn = cd.check(
                cd.driver.cuModuleGetFunction(mod.module, symbol.encode()), f"cuModuleGetFunction({symbol})"
            )
            mod.functions[symbol] = fn
        return fn

    def resources(self, function: Any, block_threads: int, shared_bytes: int) -> dict[str, object]:
        """Registers, shared/local memory (local = spills and stack), limits and occupancy of one symbol."""
        attr = cd.driver.CUfunction_attribute

        def get(name: str) -> int:
            return int(cd.check(cd.driver.cuFuncGetAttribute(getattr(attr, name), function), name))

        regs = get("CU_FUNC_ATTRIBUTE_NUM_REGS")
        out: dict[str, object] = {
            "registers": regs,
            "shared_static_bytes": get("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
            "shared_dynamic_bytes": shared_bytes,
            "local_bytes": get("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"),
            "const_bytes": get("CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES"),
            "max_threads_per_block": get("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            "ptx_version": get("CU_FUNC_ATTRIBUTE_PTX_VERSION"),
            "binary_version": get("CU_FUNC_ATTRIBUTE_BINARY_VERSION"),
            "block_threads": block_threads,
        }
        blocks = int(
            cd.check(
                cd.driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, block_threads, shared_bytes),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            )
        )
        ctx = self._context()
        max_warps = ctx.attribute("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR") // 32
        warps = blocks * (block_threads // 32)
        out["blocks_per_sm"] = blocks
        out["warps_per_sm"] = warps
        out["occupancy"] = round(warps / max_warps, 4) if max_warps else None
        out["limiter"] = _limiter(
            regs, block_threads, get("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES") + shared_bytes
        )
        return out

    # -- problem and device buffers ---------------------------------------------------

    def _pool(self, spec: TaskSpec, l2_bytes: int) -> tuple[_Pool, int]:
        """Packed, rotated weights for (format, n, k, seed), cached across M; returns (pool, copies)."""
        sampled = spec.n * spec.k > PARITY_SAMPLE_ABOVE
        key = (spec.format, spec.n, spec.k, spec.seed, spec.warm_cache)
        pool = self._pools.get(key)
        if pool is not None:
            self._pools.move_to_end(key)
            return pool, len(pool.ptrs)
        rows = sample_rows(spec.n, PARITY_SAMPLE_ROWS, spec.seed) if sampled else None
        # built once at M = 4: the first M rows of x (and of the reference) serve M = 1..3
        problem = build_problem(spec.format, spec.n, spec.k, MAX_M, seed=spec.seed, rows=rows)
        arrays = weight_arrays(problem)
        nbytes = sum(int(a.nbytes) for a in arrays)
        copies = weight_copies(nbytes, l2_bytes, spec.warm_cache)
        self._evict(nbytes * copies)
        ptrs: list[list[int]] = []
        try:
            for c in range(copies):
                copy: list[int] = []
                ptrs.append(copy)
                for array in arrays:
                    ptr = cd.mem_alloc(array.nbytes)
                    copy.append(ptr)
                    if c == 0:
                        cd.htod(ptr, np.ascontiguousarray(array), array.nbytes)
                    else:
                        cd.dtod(ptr, ptrs[0][len(copy) - 1], array.nbytes)
        except cd.CudaError:
            _Pool(ptrs, 0, problem.x, problem.expected, rows).free()
            raise
        pool = _Pool(ptrs, nbytes * copies, problem.x, problem.expected, problem.rows, problem.format)
        self._pools[key] = pool
        return pool, copies

    def _evict(self, incoming: int) -> None:
        while self._pools and sum(p.nbytes for p in self._pools.values()) + incoming > POOL_CACHE_BYTES:
            _, old = self._pools.popitem(last=False)
            old.free()

    def close(self) -> None:
        for pool in self._pools.values():
            pool.free()
        self._pools.clear()

    # -- the task -----------------------------------------------------------------

    def run_task(self, spec: TaskSpec, progress: ProgressCallback | None = None) -> TaskResult:
        """Compile, check parity of, and time every variant of one task, interleaved."""
        reason = self.supports(spec.arch, spec.phase, spec.format)
        if reason is not None:
            raise ValueError(reason)
        if not 1 <= spec.m <= MAX_M:
            raise ValueError(f"decode M must be 1..{MAX_M}, got {spec.m}")
        device = self.detect()
        if device is None:
            raise RuntimeError(cd.IMPORT_ERROR or "no sm_90 GPU detected")
        ctx = self._context()

        results: dict[str, VariantResult] = {}
        parsed: list[tuple[str, Variant]] = []
        for name in spec.variants:
            try:
                parsed.append((name, self.family.parse(name, "cuda")))
            except InvalidVariant as exc:
                results[name] = VariantResult(name, [], None, error=str(exc))
        artifact, symbols = self.build(spec.format, [v for _, v in parsed])

        def finish(copies: int = 1) -> TaskResult:
            ordered = [results[name] for name in dict.fromkeys(spec.variants)]
            return TaskResult(device, artifact, ordered, weight_copies=copies)

        if not artifact.ok:
            for name, _variant in parsed:
                results[name] = VariantResult(name, [], None, error=f"compile failed: {artifact.log}")
            return finish()

        l2 = ctx.attribute("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")
        sms = ctx.attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
        pool, copies = self._pool(spec, l2)
        m, n, k = spec.m, spec.n, spec.k
        x = np.ascontiguousarray(pool.x[:m])
        expected = pool.expected[:m]
        geos = {name: self.binding.geometry(v, n, k, m, sms) for name, v in parsed}
        ws_bytes = max([4 * int(v.params["kb"]) * m * n for _, v in parsed if int(v.params["kb"]) > 1] or [0])
        counter_count = max([g.grid[0] for g in geos.values()] or [1])
        x_ptr = cd.mem_alloc(x.nbytes)
        y_ptr = cd.mem_alloc(m * n * 4)
        ws_ptr = cd.mem_alloc(ws_bytes) if ws_bytes else 0
        ctr_ptr = cd.mem_alloc(4 * counter_count)
        tolerance = self.binding.tolerance(spec.format)
        try:
            cd.htod(x_ptr, x, x.nbytes)
            cd.check(cd.driver.cuMemsetD32(ctr_ptr, 0, counter_count), "cuMemsetD32")
            census = self._census_for(artifact.path)
            launches: list[tuple[str, Any, Geometry, list[cd.KernelArgs]]] = []
            for name, _variant in parsed:
                symbol = symbols.get(name, "")
                results[name] = VariantResult(name, [], None, symbol=symbol)
                geo = geos[name]
                try:
                    fn = self._function(artifact.path, symbol)
                    res = self.resources(fn, geo.threads, geo.shared_bytes)
                    res["grid"] = list(geo.grid)
                    res["block"] = list(geo.block)
                    res.update({f"launch_{key}": value for key, value in geo.extra.items()})
                    sass = census.get(symbol)
                    if sass is not None:
                        res["sass"] = summarize_census(sass)
                    artifact.resources[symbol] = res
                    per_copy = [
                        cd.KernelArgs(
                            self.binding.args(
                                Buffers(pool.ptrs[c], x_ptr, y_ptr, ws_ptr, ctr_ptr), m, n, k, geo
                            )
                        )
                        for c in range(copies)
                    ]
                    results[name].parity = self._parity(
                        fn, geo, per_copy[0], y_ptr, expected, pool, m, n, tolerance
                    )
                    launches.append((name, fn, geo, per_copy))
                except cd.CudaError as exc:
                    results[name].error = f"launch failed: {exc}"

            launch_log: list[str] = []  # variant of every launch in the timed loop, warm-up included
            event_ns: dict[str, list[int]] = {}
            timer = EventTimer()
            dispatchers: list[tuple[str, DispatchFn]] = [
                (name, self._dispatcher(name, fn, geo, per_copy, timer, launch_log, event_ns))
                for name, fn, geo, per_copy in launches
            ]
            trace = cupti_profiler.KernelTrace() if cupti_profiler.available() else None
            if trace is not None:
                trace.start()
            try:
                passed = [n for n, r in results.items() if r.parity is not None and r.parity.passed]
                timing = interleave_task(spec, dispatchers, passed, buffers=copies, progress=progress)
            finally:
                records = trace.stop() if trace is not None else []
                timer.close()
            clocks = self._attach_times(timing.dispatches, launch_log, records, event_ns)
            for name, clock in clocks.items():
                symbol = results[name].symbol
                if symbol in artifact.resources:
                    artifact.resources[symbol]["device_clock"] = clock
            for name, rows_ in timing.dispatches.items():
                results[name].dispatches = rows_
            for name, error in timing.errors.items():
                results[name].error = error
        finally:
            for ptr in (x_ptr, y_ptr, ws_ptr, ctr_ptr):
                if ptr:
                    cd.mem_free(ptr)
        return finish(copies)

    def _census_for(self, path: str) -> dict[str, dict[str, int]]:
        if path not in self._census:
            self._census[path] = sass_census(Path(path))
        return self._census[path]

    def _parity(
        self,
        fn: Any,
        geo: Any,
        args: cd.KernelArgs,
        y_ptr: int,
        expected: np.ndarray,
        pool: _Pool,
        m: int,
        n: int,
        tolerance: Tolerance,
    ) -> Parity:
        """NaN-fill the output, run once on copy 0, compare with the FP32 reference."""
        cd.fill_nan_f32(y_ptr, m * n)
        cd.launch(fn, geo.grid, geo.block, args, geo.shared_bytes)
        cd.synchronize()
        y = np.empty((m, n), dtype=np.float32)
        cd.dtoh(y, y_ptr, y.nbytes)
        problem = Problem(
            pool.format, n, pool.x.shape[1], m, 0, np.empty(0, np.uint8), pool.x[:m], expected, pool.rows
        )
        return problem.check(y, tolerance)

    @staticmethod
    def _dispatcher(
        name: str,
        fn: Any,
        geo: Any,
        args: list[cd.KernelArgs],
        timer: EventTimer,
        launch_log: list[str],
        event_ns: dict[str, list[int]],
    ) -> DispatchFn:
        events = event_ns.setdefault(name, [])

        def dispatch(buffer_index: int) -> int:
            timer.start()
            cd.launch(fn, geo.grid, geo.block, args[buffer_index], geo.shared_bytes)
            launch_log.append(name)
            elapsed = timer.stop_ns()
            events.append(elapsed)
            return elapsed

        return dispatch

    @staticmethod
    def _attach_times(
        dispatches: dict[str, list[Dispatch]],
        launch_log: list[str],
        records: list[cupti_profiler.KernelRecord],
        event_ns: dict[str, list[int]],
    ) -> dict[str, str]:
        """device_ns := CUPTI kernel duration (paired with launches in order), event_ns := event time.

        Returns, per variant, which clock device_ns came from: 'cupti', or 'cuda-events' when
        CUPTI is missing or its record count does not match the launches (then it is not trusted).
        """
        per_variant: dict[str, list[int]] = {name: [] for name in event_ns}
        cupti_ok = bool(records) and len(records) == len(launch_log)
        if cupti_ok:
            for name, record in zip(launch_log, records, strict=True):
                per_variant.setdefault(name, []).append(record.duration_ns)
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


def _limiter(regs: int, block_threads: int, shared_bytes: int) -> str:
    """Which resource caps blocks per SM (sm_90: 64K registers, 228 KB shared, 64 warps, 32 blocks)."""
    warps = max(1, block_threads // 32)
    by_regs = 65536 // max(1, regs * 32 * warps) if regs else 32
    by_warps = 64 // warps
    by_shared = (233472 // shared_bytes) if shared_bytes else 32
    caps = {"registers": by_regs, "warps": by_warps, "shared": by_shared, "blocks": 32}
    return min(caps, key=lambda key: caps[key])
