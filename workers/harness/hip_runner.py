"""Per-task HIP timing harness: ``python -m workers.harness.hip_runner TASK.json`` (or ``--probe``).

Runs in its own process (a crash or hang kills only it) and usually under rocprofv3 / rocprof, which the
parent (workers/backends/rocm.py) puts in front of it. The measurement protocol is the one runner's
(workers/runner.py); this module supplies its HIP primitives, written against hip-python's documented API
(``from hip import hip``): hipModuleLoadData / hipModuleGetFunction, a packed kernel-argument buffer passed
through ``extra`` (HIP_LAUNCH_PARAM_BUFFER_POINTER/SIZE), hipMalloc / hipMemcpy* / hipMemsetD32 (NaN bit
pattern for outputs) and hipEvent timing.

Protocol: the task JSON holds the TaskSpec and the compiled variants (name, symbol, code object path); the
harness writes ``progress.jsonl`` (one line before each risky step, so the parent can name the variant that
crashed or hung) and ``result.json`` (device, launch log in dispatch order, per variant event/wall times and
parity). GPU time proper comes from the profiler; hipEvent time is kept beside it.
"""

from __future__ import annotations

import ctypes
import json
import struct
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernels.arches import get_arch
from kernels.packages.loader import package_for
from kernels.packages.package import DeviceFacts, Geometry
from workers.backends.base import ArtifactInfo, DeviceInfo, Dispatch, TaskSpec
from workers.harness.interleave import DispatchFn
from workers.runner import ArgValue, CompiledVariants, Prelaunch, run_task

NAN_BITS = 0x7FC00000  # float32 quiet NaN: outputs are filled with it before a parity run
# HIP_LAUNCH_PARAM_* markers of the ``extra`` array (hip_runtime_api.h)
LAUNCH_PARAM_BUFFER_POINTER = 0x01
LAUNCH_PARAM_BUFFER_SIZE = 0x02
LAUNCH_PARAM_END = 0x03
_PACK = {"ptr": ("<Q", 8), "i32": ("<i", 4), "u32": ("<I", 4), "i64": ("<q", 8), "f32": ("<f", 4)}


class HipError(RuntimeError):
    """A HIP call returned an error code."""


# -- pure parts (tested without a GPU) ------------------------------------------------------


def pack_kernel_args(args: Sequence[ArgValue]) -> bytes:
    """The kernel-argument buffer in the AMDGPU kernarg layout: natural alignment, no hidden args.

    Pointers and 64-bit ints are 8 bytes aligned to 8, 32-bit values 4 bytes aligned to 4; the total is
    rounded up to 8.
    """
    buf = bytearray()
    for kind, value in args:
        try:
            fmt, size = _PACK[kind]
        except KeyError:
            raise TypeError(f"cannot pack a kernel argument of kind {kind!r}") from None
        buf.extend(b"\0" * (-len(buf) % size))
        buf.extend(struct.pack(fmt, float(value) if kind == "f32" else int(value)))
    buf.extend(b"\0" * (-len(buf) % 8))
    return bytes(buf)


def llc_bytes(arch: str, l2_from_props: int) -> int:
    """The cache a rotated weight set must exceed: the larger of what the device says and the arch table's
    (hipDeviceProp_t does not report MI300X / MI355X Infinity Cache)."""
    return max(int(l2_from_props or 0), get_arch(arch).llc_bytes)


# -- the HIP side -----------------------------------------------------------------------------


def _hip() -> Any:
    from hip import hip  # hip-python; only importable where a ROCm runtime is installed

    return hip


def _hip_python_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hip-python")
    except PackageNotFoundError:
        return "unknown version"


def error_name(err: Any) -> str:
    """'hipErrorNoDevice', not '100': hip-python's hipError_t is an IntEnum, which formats as its number."""
    return str(getattr(err, "name", err))


def check(result: Any, what: str) -> Any:
    """hip-python returns (err, *values); raise on an error, return the value(s)."""
    hip = _hip()
    items = result if isinstance(result, tuple) else (result,)
    err, values = items[0], items[1:]
    if err != hip.hipError_t.hipSuccess:
        raise HipError(f"{what}: {error_name(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


@dataclass
class DeviceProps:
    name: str
    arch: str
    compute_units: int
    l2_bytes: int
    uuid: str
    runtime_version: str
    driver_version: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value)


def device_props(ordinal: int = 0) -> DeviceProps:
    """The device's properties; HipError (not a traceback) when there is none or the runtime does not fit."""
    hip = _hip()
    err, count = hip.hipGetDeviceCount()
    if err != hip.hipError_t.hipSuccess or count <= ordinal:
        raise HipError(f"no ROCm device {ordinal}: hipGetDeviceCount: {error_name(err)}, {count} device(s)")
    props = hip.hipDeviceProp_t()
    try:
        check(hip.hipGetDeviceProperties(props, ordinal), "hipGetDeviceProperties")
    except RuntimeError as error:  # hip-python resolves versioned symbols (e.g. ...R0600) at first call
        raise HipError(
            f"this hip-python ({_hip_python_version()}) does not fit the host's HIP runtime ({error}); "
            "install the hip-python release of the host's ROCm version"
        ) from None
    arch = _text(props.gcnArchName).split(":", 1)[0]  # "gfx90a:sramecc+:xnack-" → "gfx90a"
    uuid = ""
    try:
        raw = check(hip.hipDeviceGetUuid(ordinal), "hipDeviceGetUuid")
        uuid = bytes(getattr(raw, "bytes", b"")).hex() if raw is not None else ""
    except (HipError, AttributeError, TypeError):
        uuid = ""
    runtime = check(hip.hipRuntimeGetVersion(), "hipRuntimeGetVersion")
    driver = check(hip.hipDriverGetVersion(), "hipDriverGetVersion")
    return DeviceProps(
        name=_text(props.name),
        arch=arch,
        compute_units=int(props.multiProcessorCount),
        l2_bytes=int(props.l2CacheSize),
        uuid=uuid or f"{arch}-{int(props.pciBusID)}-{int(props.pciDeviceID)}",
        runtime_version=f"hip-runtime {runtime}",
        driver_version=f"hip-driver {driver}",
    )


@dataclass
class HipKernel:
    name: str
    symbol: str
    function: Any


@dataclass
class Harness:
    """State of one task run: launch log, progress file, modules."""

    workdir: Path
    launches: list[dict[str, Any]] = field(default_factory=list)
    modules: dict[str, Any] = field(default_factory=dict)

    def progress(self, **entry: Any) -> None:
        with (self.workdir / "progress.jsonl").open("a") as handle:
            handle.write(json.dumps(entry) + "\n")
            handle.flush()

    def function(self, path: str, symbol: str) -> Any:
        hip = _hip()
        module = self.modules.get(path)
        if module is None:
            data = Path(path).read_bytes()
            module = self.modules[path] = check(hip.hipModuleLoadData(data), f"hipModuleLoadData({path})")
        return check(hip.hipModuleGetFunction(module, symbol.encode()), f"hipModuleGetFunction({symbol})")


class HipDevice:
    """Runner primitives through hip-python; every launch is logged for the profiler mapping."""

    def __init__(self, props: DeviceProps, harness: Harness) -> None:
        arch = get_arch(props.arch)
        self.facts = DeviceFacts("rocm", props.arch, props.compute_units, arch.wave)
        self.llc_bytes = llc_bytes(props.arch, props.l2_bytes)
        self.harness = harness
        self.pointers: list[Any] = []
        self._events: tuple[Any, Any] | None = None
        self._dispatches = 0  # dispatch ids for the launch log

    def alloc(self, nbytes: int) -> int:
        ptr = check(_hip().hipMalloc(max(4, int(nbytes))), f"hipMalloc({nbytes})")
        self.pointers.append(ptr)
        return int(ptr)

    def upload(self, array: np.ndarray) -> int:
        ptr = self.alloc(int(array.nbytes))
        check(_hip().hipMemcpyHtoD(ptr, np.ascontiguousarray(array), int(array.nbytes)), "hipMemcpyHtoD")
        return ptr

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        check(_hip().hipMemcpyDtoD(dst, src, nbytes), "hipMemcpyDtoD")

    def zero(self, ptr: int, nbytes: int) -> None:
        check(_hip().hipMemset(ptr, 0, nbytes), "hipMemset")

    def fill_nan_f32(self, ptr: int, count: int) -> None:
        check(_hip().hipMemsetD32(ptr, NAN_BITS, count), "hipMemsetD32(y, NaN)")

    def download(self, ptr: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        check(_hip().hipMemcpyDtoH(out, ptr, out.nbytes), "hipMemcpyDtoH")
        return out

    def _launch(
        self,
        kernel: HipKernel,
        geometry: Geometry,
        args: list[ArgValue],
        stage: str,
        buffer: int,
        dispatch: int | None = None,
    ) -> None:
        """One hipModuleLaunchKernel with the packed argument buffer; logged for profiler mapping."""
        hip = _hip()
        packed = pack_kernel_args(args)
        arg_buffer = ctypes.create_string_buffer(packed, len(packed))
        arg_size = ctypes.c_size_t(len(packed))
        extra = (ctypes.c_void_p * 5)(
            LAUNCH_PARAM_BUFFER_POINTER,
            ctypes.addressof(arg_buffer),
            LAUNCH_PARAM_BUFFER_SIZE,
            ctypes.addressof(arg_size),
            LAUNCH_PARAM_END,
        )
        check(
            hip.hipModuleLaunchKernel(
                kernel.function, *geometry.grid, *geometry.block, geometry.shared_bytes, None, None, extra
            ),
            f"hipModuleLaunchKernel({kernel.symbol})",
        )
        entry: dict[str, Any] = {
            "variant": kernel.name, "symbol": kernel.symbol, "stage": stage, "buffer": buffer,
        }  # fmt: skip
        if dispatch is not None:
            entry["dispatch"] = dispatch  # a prelaunch kernel and its variant share one dispatch id
        self.harness.launches.append(entry)

    def launch(self, kernel: Any, geometry: Geometry, args: list[ArgValue]) -> None:
        self.harness.progress(stage="parity", variant=getattr(kernel, "name", None))
        self._launch(kernel, geometry, args, "parity" if isinstance(kernel, HipKernel) else "prepare", 0)
        check(_hip().hipDeviceSynchronize(), "hipDeviceSynchronize")

    def launch_overlapped(
        self, pre: Prelaunch, kernel: Any, geometry: Geometry, args: list[ArgValue]
    ) -> None:
        """HIP runs the two in turn (overlap is a CUDA launch mode)."""
        self.launch(pre.kernel, pre.geometry, args)
        self.launch(kernel, geometry, args)

    def dispatcher(
        self,
        name: str,
        kernel: Any,
        geometry: Geometry,
        args_by_copy: list[list[ArgValue]],
        pre: Prelaunch | None = None,
    ) -> DispatchFn:
        hip = _hip()
        steps = [(kernel, geometry)] if pre is None else [(pre.kernel, pre.geometry), (kernel, geometry)]

        def dispatch(buffer_index: int) -> int:
            assert self._events is not None, "dispatch outside timing()"
            start, stop = self._events
            self._dispatches += 1
            check(hip.hipEventRecord(start, None), "hipEventRecord")
            for step_kernel, step_geometry in steps:
                args = args_by_copy[buffer_index]
                self._launch(step_kernel, step_geometry, args, "timed", buffer_index, self._dispatches)
            check(hip.hipEventRecord(stop, None), "hipEventRecord")
            check(hip.hipEventSynchronize(stop), "hipEventSynchronize")
            return round(float(check(hip.hipEventElapsedTime(start, stop), "hipEventElapsedTime")) * 1e6)

        return dispatch

    @contextmanager
    def timing(self) -> Iterator[None]:
        hip = _hip()
        self.harness.progress(stage="interleave")
        self._events = (
            check(hip.hipEventCreate(), "hipEventCreate"),
            check(hip.hipEventCreate(), "hipEventCreate"),
        )
        try:
            yield
        finally:
            for event in self._events:
                hip.hipEventDestroy(event)
            self._events = None
            self.harness.progress(stage="done")

    def attach(self, dispatches: dict[str, list[Dispatch]]) -> dict[str, str]:
        return {name: "hip-events" for name, rows in dispatches.items() if rows}  # the parent maps rocprof

    def resources(self, kernel: Any, geometry: Geometry) -> dict[str, object]:
        return {}  # the parent reads them from the code object (workers/isa)

    def free_all(self) -> None:
        hip = _hip()
        for ptr in self.pointers:
            hip.hipFree(ptr)
        self.pointers.clear()


def run(task: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Load every variant, then the runner's protocol; returns the result document."""
    harness = Harness(workdir)
    props = device_props(int(task.get("ordinal", 0)))
    spec = TaskSpec(**{**task["spec"], "variants": tuple(v["name"] for v in task["variants"])})
    package = package_for(spec.phase, spec.kernel_root, spec.kernel)
    compiled = CompiledVariants(ArtifactInfo("", "", package.version, "", (), False))
    for entry in task["variants"]:
        name, symbol = entry["name"], entry["symbol"]
        compiled.symbols[name] = symbol
        harness.progress(stage="load", variant=name)
        try:
            compiled.kernels[name] = HipKernel(name, symbol, harness.function(entry["path"], symbol))
            pre = entry.get("prelaunch")
            if pre:
                compiled.prelaunch[name] = HipKernel(name, pre, harness.function(entry["path"], pre))
        except Exception as exc:  # one bad variant must not sink the task
            compiled.errors[name] = f"load failed: {type(exc).__name__}: {exc}"
    prepare = task.get("prepare")
    if prepare:
        harness.progress(stage="load", variant="prepare")
        compiled.prepare = HipKernel(
            "prepare", prepare["symbol"], harness.function(prepare["path"], prepare["symbol"])
        )
    info = DeviceInfo("rocm", props.arch, props.name, props.compute_units, props.uuid)
    device = HipDevice(props, harness)
    harness.progress(stage="problem")
    result = run_task(package, spec, device, info, compiled)
    timed_counts = {r.variant: len(r.dispatches) for r in result.results}
    # warm-up launches precede the timed ones of a variant: mark them so the log says what it was
    per_variant: dict[str, list[dict[str, Any]]] = {}
    for entry in harness.launches:
        per_variant.setdefault(entry["variant"], []).append(entry)
    for name, entries in per_variant.items():
        ids = list(dict.fromkeys(e.get("dispatch", id(e)) for e in entries if e["stage"] == "timed"))
        warm = set(ids[: len(ids) - timed_counts.get(name, 0)])
        for e in entries:
            if e["stage"] == "timed" and e.get("dispatch", id(e)) in warm:
                e["stage"] = "warmup"
    return {
        "device": props.as_dict(),
        "weight_copies": result.weight_copies,
        "cache_bytes": device.llc_bytes,
        "launches": harness.launches,
        "variants": {
            r.variant: {
                "dispatches": [d.__dict__ for d in r.dispatches],
                "parity": dict(r.parity.__dict__) if r.parity else None,
                "error": r.error,
            }
            for r in result.results
        },
    }


def main(argv: Sequence[str]) -> int:
    if list(argv[:1]) == ["--probe"]:
        try:
            print(json.dumps(device_props(int(argv[1]) if len(argv) > 1 else 0).as_dict()))
        except HipError as error:
            print(f"probe: {error}", file=sys.stderr)
            return 1
        return 0
    if len(argv) != 1:
        print("usage: python -m workers.harness.hip_runner TASK.json | --probe [ORDINAL]", file=sys.stderr)
        return 2
    task_path = Path(argv[0])
    task = json.loads(task_path.read_text())
    workdir = Path(task.get("workdir") or task_path.parent)
    t0 = time.perf_counter()
    result = run(task, workdir)
    result["harness_s"] = round(time.perf_counter() - t0, 3)
    tmp = workdir / "result.json.tmp"
    tmp.write_text(json.dumps(result))
    tmp.replace(workdir / "result.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
