"""The one runner: the measurement protocol (DESIGN §5), written once for every backend and every package.

A backend supplies primitives (a ``Device``: allocate, copy, fill, launch, time, resources) and the compiled
kernels; the runner owns everything that makes a number trustworthy:

1. the problem: GGUF blocks quantized by the ``gguf`` package, activations, and the FP32 reference built from
   the same blocks (row-sampled above ``PARITY_SAMPLE_ABOVE`` weights, so the LM head never materialises);
2. the weights in the package's layout (``gguf`` blocks as stored, a built-in layout, or the package's own
   ``prepare`` kernel, run once per buffer and never timed), rotated over enough copies that the working set
   exceeds twice the last-level cache (one cap for all backends);
3. per variant: point-level restrictions, launch geometry and arguments from the manifest, outputs filled with
   NaN before the parity run, parity against the reference with the package's tolerance;
4. interleaved (round-robin) timing with warm-up, exhaustive or raced, through the device's timing observer.

KernelTuner's split (backends / runner / observers) is the model; the backend modules stay small.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from kernels.families.base import InvalidVariant, Variant
from kernels.formats.registry import get_format
from kernels.packages.expressions import ExpressionError, parse
from kernels.packages.layouts import layout_for, needs_packing
from kernels.packages.manifest import ArgSpec
from kernels.packages.package import NOT_APPLICABLE_PREFIX, DeviceFacts, Geometry, KernelPackage
from kernels.reference import Problem, Tolerance, build_problem, sample_rows
from workers.backends.base import (
    ArtifactInfo,
    DeviceInfo,
    Dispatch,
    ProgressCallback,
    TaskResult,
    TaskSpec,
    VariantResult,
)
from workers.harness.interleave import DispatchFn, interleave_task

MAX_WEIGHT_COPIES = 256
MAX_ROTATION_BYTES = 8 << 30
PARITY_SAMPLE_ABOVE = 1 << 26  # weights; above this the reference covers a seeded row sample
PARITY_SAMPLE_ROWS = 512

ArgValue = tuple[str, int | float]  # ("ptr" | "i32" | "u32" | "i64" | "f32", value)


class Prelaunch(NamedTuple):
    """The [prelaunch] kernel handle, its launch geometry, and whether the variant may overlap it."""

    kernel: Any
    geometry: Geometry
    overlap: bool = False  # [prelaunch] overlap: programmatic dependent launch of the variant (CUDA)


class Device(Protocol):
    """A backend's primitives on the one device a worker is pinned to."""

    facts: DeviceFacts
    llc_bytes: int

    def alloc(self, nbytes: int) -> int:
        """A buffer of ``nbytes`` (pointer); freed by ``free_all``."""
        ...

    def upload(self, array: np.ndarray) -> int: ...

    def copy(self, dst: int, src: int, nbytes: int) -> None: ...

    def zero(self, ptr: int, nbytes: int) -> None: ...

    def fill_nan_f32(self, ptr: int, count: int) -> None: ...

    def download(self, ptr: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray: ...

    def launch(self, kernel: Any, geometry: Geometry, args: list[ArgValue]) -> None:
        """One synchronous, untimed launch (parity runs, the prepare kernel)."""
        ...

    def launch_overlapped(
        self, pre: Prelaunch, kernel: Any, geometry: Geometry, args: list[ArgValue]
    ) -> None:
        """The parity run of a ``pre.overlap`` variant, launched as its timed dispatches launch it (CUDA:
        one graph, the variant a programmatic dependent launch), so a read before the wait shows in parity."""
        ...

    def dispatcher(
        self,
        name: str,
        kernel: Any,
        geometry: Geometry,
        args_by_copy: list[list[ArgValue]],
        pre: Prelaunch | None = None,
    ) -> DispatchFn:
        """A timed dispatch of one variant reading weight copy ``i``; returns the device time in ns.

        With ``pre`` the dispatch is two launches, the prelaunch kernel then the variant (same arguments),
        and its device time is the sum of both kernels' times; with ``pre.overlap`` (CUDA) the two are one
        graph whose variant launch is a programmatic dependent one, and the time is their span.
        """
        ...

    def timing(self) -> Any:
        """A context manager around the timed loop (a profiler session); ``attach`` runs after it."""
        ...

    def attach(self, dispatches: dict[str, list[Dispatch]]) -> dict[str, str]:
        """Replace per-dispatch times by the profiler's where it has them; the clock used per variant."""
        ...

    def resources(self, kernel: Any, geometry: Geometry) -> dict[str, object]: ...

    def free_all(self) -> None: ...


@dataclass
class CompiledVariants:
    """What a backend's compile step hands the runner: loaded kernels per variant, or why not."""

    artifact: ArtifactInfo
    kernels: dict[str, Any] = field(default_factory=dict)  # variant name -> loaded kernel handle
    symbols: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # variant name -> compile/load message
    prepare: Any = None  # the package's [prepare] kernel, when it has one
    prelaunch: dict[str, Any] = field(default_factory=dict)  # variant name -> its [prelaunch] kernel


def weight_copies(copy_bytes: int, llc_bytes: int, warm_cache: bool) -> int:
    """Copies whose total exceeds twice the last-level cache (so no LRU-ish cache holds them), capped."""
    if warm_cache or copy_bytes <= 0:
        return 1
    wanted = math.floor(2 * llc_bytes / copy_bytes) + 1
    by_memory = max(1, MAX_ROTATION_BYTES // copy_bytes)
    return max(1, min(wanted, MAX_WEIGHT_COPIES, by_memory))


def parse_variants(
    package: KernelPackage, spec: TaskSpec, backend: str
) -> tuple[list[Variant], dict[str, VariantResult]]:
    """The task's variants that belong to the package's space, and an error result for the others."""
    parsed: list[Variant] = []
    rejected: dict[str, VariantResult] = {}
    for name in spec.variants:
        try:
            parsed.append(package.parse(name, backend))
        except InvalidVariant as error:
            rejected[name] = VariantResult(name, [], None, error=str(error))
    return parsed, rejected


def build_task_problem(package: KernelPackage, spec: TaskSpec) -> Problem:
    rows = None
    if spec.n * spec.k > PARITY_SAMPLE_ABOVE:
        rows = sample_rows(spec.n, PARITY_SAMPLE_ROWS, spec.seed)
    return build_problem(
        spec.format,
        spec.n,
        spec.k,
        spec.m,
        seed=spec.seed,
        rows=rows,
        packed=needs_packing(package.manifest.weights),
    )


def tolerance_of(package: KernelPackage) -> Tolerance:
    parity = package.manifest.parity
    return Tolerance(f"{package.name}", parity.cosine_min, parity.rel_l2_max)


@dataclass
class _Weights:
    """Device buffers of the weights: per copy, one pointer per layout part (0 = a null pointer)."""

    copies: list[dict[str, int]]
    nbytes: int  # true bytes of one copy as the kernel reads them


def _upload_weights(
    device: Device, package: KernelPackage, problem: Problem, spec: TaskSpec, compiled: CompiledVariants
) -> _Weights:
    if package.manifest.weights == "prepare":
        return _prepared_weights(device, package, problem, spec, compiled)
    layout = layout_for(package.manifest.weights)
    arrays = layout.arrays(problem)
    nbytes = sum(int(a.nbytes) for a in arrays.values() if a is not None)
    copies = weight_copies(nbytes, device.llc_bytes, spec.warm_cache)
    first = {
        part: (device.upload(np.ascontiguousarray(a)) if a is not None else 0) for part, a in arrays.items()
    }
    buffers = [first]
    for _ in range(1, copies):
        copy: dict[str, int] = {}
        for part, array in arrays.items():
            if array is None:
                copy[part] = 0
                continue
            copy[part] = device.alloc(int(array.nbytes))
            device.copy(copy[part], first[part], int(array.nbytes))
        buffers.append(copy)
    return _Weights(buffers, nbytes)


def _prepared_weights(
    device: Device, package: KernelPackage, problem: Problem, spec: TaskSpec, compiled: CompiledVariants
) -> _Weights:
    """Run the package's prepare kernel once per copy: GGUF blocks in, the package's own layout out."""
    prepare = package.manifest.prepare
    assert prepare is not None
    if compiled.prepare is None:
        raise RuntimeError(f"{package.name}: the prepare kernel {prepare.symbol!r} did not compile or load")
    fmt = get_format(spec.format)
    bindings = {
        "n": spec.n, "k": spec.k, "m": spec.m, "format": fmt.name, "block_weights": fmt.block_weights,
        "block_bytes": fmt.block_bytes, "row_bytes": fmt.row_bytes(spec.k), **device.facts.bindings(),
    }  # fmt: skip
    size = parse(prepare.size).evaluate_int(bindings)
    grid = tuple(parse(s).evaluate_int(bindings) for s in prepare.grid)
    block = tuple(parse(s).evaluate_int(bindings) for s in prepare.block)
    geometry = Geometry(grid, block, 0, bindings)  # type: ignore[arg-type]
    source = device.upload(np.ascontiguousarray(problem.weights))
    copies = weight_copies(size, device.llc_bytes, spec.warm_cache)
    buffers = []
    for _ in range(copies):
        out = device.alloc(size)
        device.launch(
            compiled.prepare, geometry, [("ptr", source), ("ptr", out), ("i32", spec.n), ("i32", spec.k)]
        )
        buffers.append({"prepared": out})
    return _Weights(buffers, size)


def kernel_args(
    args: Sequence[ArgSpec],
    weights: dict[str, int],
    x: int,
    y: int,
    workspaces: dict[int, int],
    values: dict[str, Any],
) -> list[ArgValue]:
    """The argument list of one launch, in manifest order; weights parts fill ``weights`` args in order."""
    out: list[ArgValue] = []
    parts = list(weights)
    next_part = 0
    for index, arg in enumerate(args):
        if arg.role == "weights":
            part = arg.part or parts[min(next_part, len(parts) - 1)]
            next_part += 1
            if part not in weights:
                raise ValueError(f"args.{index}: the layout has no part {part!r} (it has {', '.join(parts)})")
            out.append(("ptr", weights[part]))
        elif arg.role == "x":
            out.append(("ptr", x))
        elif arg.role == "y":
            out.append(("ptr", y))
        elif arg.role == "workspace":
            out.append(("ptr", workspaces.get(index, 0)))
        elif arg.role in ("m", "n", "k"):
            out.append(("i32", int(values[arg.role])))
        elif arg.role == "scalar":
            assert arg.value is not None
            kind = {"f32": "f32", "i64": "i64", "u32": "u32"}.get(arg.dtype or "i32", "i32")
            value = parse(arg.value).evaluate(values)
            out.append((kind, float(value) if kind == "f32" else int(value)))  # type: ignore[arg-type]
        else:
            raise ValueError(f"args.{index}: role {arg.role!r} is not a kernel argument of the timed kernel")
    return out


def run_task(
    package: KernelPackage,
    spec: TaskSpec,
    device: Device,
    device_info: DeviceInfo,
    compiled: CompiledVariants,
    progress: ProgressCallback | None = None,
) -> TaskResult:
    """Check parity of, and time, every compiled variant of one task, interleaved; never raises for a
    per-variant problem (it becomes that variant's error)."""
    backend = device.facts.backend
    variants, results = parse_variants(package, spec, backend)
    fmt = get_format(spec.format)

    def finish(copies: int = 1) -> TaskResult:
        ordered = [results[name] for name in dict.fromkeys(spec.variants)]
        return TaskResult(device_info, compiled.artifact, ordered, weight_copies=copies)

    runnable: list[tuple[Variant, dict[str, Any], Geometry, Prelaunch | None]] = []
    for variant in variants:
        result = results[variant.name] = VariantResult(
            variant.name, [], None, symbol=compiled.symbols.get(variant.name, "")
        )
        if variant.name in compiled.errors:
            result.error = compiled.errors[variant.name]
            continue
        try:
            values = package.bindings(variant, spec.n, spec.k, spec.m, fmt, device.facts)
            broken = package.point_problems(values)
            if broken:
                result.error = NOT_APPLICABLE_PREFIX + "; ".join(broken)
                continue
            pre: Prelaunch | None = None
            if package.has_prelaunch(variant, backend):
                if variant.name not in compiled.prelaunch:
                    symbol = package.prelaunch_symbol(variant)
                    result.error = f"prelaunch kernel {symbol} did not compile or load"
                    continue
                pre = Prelaunch(
                    compiled.prelaunch[variant.name],
                    package.prelaunch_geometry(values),
                    package.prelaunch_overlaps(backend),
                )
            runnable.append((variant, values, package.geometry(values), pre))
        except ExpressionError as error:
            result.error = f"manifest expression failed: {error}"
    if not runnable:
        return finish()

    problem = build_task_problem(package, spec)
    tolerance = tolerance_of(package)
    args_spec = package.args_for(backend)
    try:
        weights = _upload_weights(device, package, problem, spec, compiled)
        x_ptr = device.upload(np.ascontiguousarray(problem.x, dtype=np.float32))
        y_ptr = device.alloc(spec.m * spec.n * 4)
        dispatchers: list[tuple[str, DispatchFn]] = []
        for variant, values, geometry, pre in runnable:
            result = results[variant.name]
            kernel = compiled.kernels[variant.name]
            try:
                workspaces = {}
                for index, arg in enumerate(args_spec):
                    if arg.role == "workspace" and arg.size is not None:
                        size = parse(arg.size).evaluate_int(values)
                        workspaces[index] = device.alloc(size) if size > 0 else 0
                        if size > 0 and arg.zero:
                            device.zero(workspaces[index], size)
                by_copy = [
                    kernel_args(args_spec, w, x_ptr, y_ptr, workspaces, values) for w in weights.copies
                ]
                resources = device.resources(kernel, geometry)
                resources.update({"grid": list(geometry.grid), "block": list(geometry.block)})
                if pre is not None:
                    resources["prelaunch"] = {
                        **device.resources(pre.kernel, pre.geometry),
                        "grid": list(pre.geometry.grid),
                        "block": list(pre.geometry.block),
                    }
                if result.symbol:
                    compiled.artifact.resources.setdefault(result.symbol, {}).update(resources)
                device.fill_nan_f32(y_ptr, spec.m * spec.n)
                if pre is not None and pre.overlap:
                    device.launch_overlapped(pre, kernel, geometry, by_copy[0])
                else:
                    if pre is not None:
                        device.launch(pre.kernel, pre.geometry, by_copy[0])
                    device.launch(kernel, geometry, by_copy[0])
                output = device.download(y_ptr, (spec.m, spec.n), np.float32)
                result.parity = problem.check(output, tolerance)
                fn = device.dispatcher(variant.name, kernel, geometry, by_copy, pre=pre)
                dispatchers.append((variant.name, fn))
            except Exception as error:  # one broken variant must not sink the task
                result.error = f"launch failed: {type(error).__name__}: {error}"
        passed = [name for name, r in results.items() if r.parity is not None and r.parity.passed]
        with _timing(device):
            timing = interleave_task(
                spec, dispatchers, passed, buffers=len(weights.copies), progress=progress
            )
        clocks = device.attach(timing.dispatches)
        for name, rows in timing.dispatches.items():
            results[name].dispatches = rows
            symbol = results[name].symbol
            if symbol and name in clocks:
                compiled.artifact.resources.setdefault(symbol, {})["device_clock"] = clocks[name]
        for name, message in timing.errors.items():
            results[name].error = message
        return finish(len(weights.copies))
    finally:
        device.free_all()


@contextmanager
def _timing(device: Device) -> Iterator[None]:
    with device.timing():
        yield
