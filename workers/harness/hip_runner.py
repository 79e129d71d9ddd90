"""Per-task HIP timing harness: ``python -m workers.harness.hip_runner TASK.json`` (or ``--probe``).

Runs in its own process (a crash or hang kills only it) and usually under rocprofv3 / rocprof,
which the parent (workers/backends/rocm.py) puts in front of it. Written against hip-python's
documented API (``from hip import hip``): hipModuleLoadData / hipModuleGetFunction, a packed
kernel-argument buffer passed through ``extra`` (HIP_LAUNCH_PARAM_BUFFER_POINTER/SIZE),
hipMalloc / hipMemcpyHtoD / hipMemsetD32 (NaN bit pattern for outputs) and hipEvent timing.

Protocol: the task JSON names the variants (name, symbol, code object path) and the point; the
harness writes ``progress.jsonl`` (one line before each risky step, so the parent can name the
variant that crashed or hung) and ``result.json`` (device, launch log in dispatch order, per
variant event/wall times and parity). GPU time proper comes from the profiler; hipEvent time is
kept beside it.
"""

from __future__ import annotations

import ctypes
import json
import math
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernels.families import abi, family_for_phase
from kernels.families.base import Variant
from kernels.reference import INT8_ACTIVATIONS, Problem, build_problem, sample_rows
from workers.backends.base import TaskSpec
from workers.harness.interleave import interleave
from workers.harness.racing import RacingPolicy, policy_for

NAN_BITS = 0x7FC00000  # float32 quiet NaN: outputs are filled with it before a parity run
WAVE_SIZE = 64  # gfx9 wavefronts
MAX_WEIGHT_COPIES = 256
MAX_ROTATION_BYTES = 8 << 30
PARITY_SAMPLE_ABOVE = 1 << 26  # weights; above this parity covers a seeded row sample
PARITY_SAMPLE_ROWS = 512
# Last-level cache per arch when the device properties do not say (MI50: 4 MB L2;
# MI300X / MI355X: 256 MB Infinity Cache, which hipDeviceProp_t does not report).
KNOWN_LLC_BYTES: dict[str, int] = {
    "gfx906": 4 << 20,
    "gfx90a": 8 << 20,
    "gfx942": 256 << 20,
    "gfx950": 256 << 20,
}
# HIP_LAUNCH_PARAM_* markers of the ``extra`` array (hip_runtime_api.h)
LAUNCH_PARAM_BUFFER_POINTER = 0x01
LAUNCH_PARAM_BUFFER_SIZE = 0x02
LAUNCH_PARAM_END = 0x03


class HipError(RuntimeError):
    """A HIP call returned an error code."""


# -- pure parts (tested without a GPU) ------------------------------------------------------


def pack_kernel_args(args: Sequence[abi.KernelArg], values: dict[str, int]) -> bytes:
    """The kernel-argument buffer in the AMDGPU kernarg layout: natural alignment, no hidden args.

    Pointers are 8 bytes aligned to 8, ints 4 bytes aligned to 4; the total is rounded up to 8.
    """
    buf = bytearray()
    for arg in args:
        value = int(values[arg.name])
        if arg.is_pointer:
            fmt, size = "<Q", 8
        elif arg.ctype.strip() in ("int", "int32_t"):
            fmt, size = "<i", 4
        elif arg.ctype.strip() in ("unsigned", "uint32_t", "unsigned int"):
            fmt, size = "<I", 4
        else:
            raise TypeError(f"cannot pack kernel argument {arg.name} of type {arg.ctype!r}")
        buf.extend(b"\0" * (-len(buf) % size))
        buf.extend(struct.pack(fmt, value))
    buf.extend(b"\0" * (-len(buf) % 8))
    return bytes(buf)


def launch_for(phase: str, variant: Variant, n: int, k: int, m: int, compute_units: int) -> abi.Launch:
    if phase == "decode":
        return abi.decode_launch(n, k, m, variant, compute_units, WAVE_SIZE)
    if phase == "prefill":
        return abi.prefill_launch(n, k, m, variant, compute_units, WAVE_SIZE)
    raise ValueError(f"no GPU kernels for phase {phase!r}")


def arg_values(phase: str, launch: abi.Launch, pointers: dict[str, int]) -> dict[str, int]:
    """Every ABI argument's value: device pointers by name (0 = NULL), ints from the launch."""
    values: dict[str, int] = {}
    for arg in abi.ARGS[phase]:
        values[arg.name] = pointers.get(arg.name, 0) if arg.is_pointer else int(launch.scalars[arg.name])
    return values


def llc_bytes(arch: str, l2_from_props: int) -> int:
    """The cache a rotated weight set must exceed: the larger of what the device says and what we know."""
    return max(int(l2_from_props or 0), KNOWN_LLC_BYTES.get(arch, 0))


def weight_copies(copy_bytes: int, cache_bytes: int, warm_cache: bool) -> int:
    """Enough copies that their total exceeds twice the last-level cache (capped by count and memory)."""
    if warm_cache or copy_bytes <= 0:
        return 1
    wanted = math.floor(2 * cache_bytes / copy_bytes) + 1
    return max(1, min(wanted, MAX_WEIGHT_COPIES, max(1, MAX_ROTATION_BYTES // copy_bytes)))


def weight_arrays(problem: Problem) -> dict[str, np.ndarray]:
    """Kernel-layout arrays by ABI argument name (fp16 scales/mins travel as their bits)."""
    packed = problem.packed
    if packed is None:
        raise ValueError(f"{problem.format.name}: no kernel-layout packing")
    out = {
        "qs": np.ascontiguousarray(packed.qs),
        "scales": np.ascontiguousarray(packed.scales.view(np.uint16)),
    }
    if packed.mins is not None:
        out["mins"] = np.ascontiguousarray(packed.mins.view(np.uint16))
    return out


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


class DeviceMemory:
    """hipMalloc'd buffers, freed together."""

    def __init__(self) -> None:
        self.pointers: list[Any] = []

    def alloc(self, nbytes: int) -> int:
        hip = _hip()
        ptr = check(hip.hipMalloc(max(4, int(nbytes))), f"hipMalloc({nbytes})")
        self.pointers.append(ptr)
        return int(ptr)

    def upload(self, array: np.ndarray) -> int:
        hip = _hip()
        ptr = self.alloc(array.nbytes)
        check(hip.hipMemcpyHtoD(ptr, array, array.nbytes), "hipMemcpyHtoD")
        return ptr

    def free(self) -> None:
        hip = _hip()
        for ptr in self.pointers:
            hip.hipFree(ptr)
        self.pointers.clear()


@dataclass
class LoadedVariant:
    name: str
    symbol: str
    function: Any
    launch: abi.Launch
    workspace: int = 0
    counters: int = 0


@dataclass
class Harness:
    """State of one task run: launch log, progress file, modules."""

    task: dict[str, Any]
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

    def launch(self, v: LoadedVariant, pointers: dict[str, int], stage: str, buffer_index: int) -> None:
        """One hipModuleLaunchKernel with the packed argument buffer; logged for profiler mapping."""
        hip = _hip()
        phase = self.task["phase"]
        args = pack_kernel_args(abi.ARGS[phase], arg_values(phase, v.launch, pointers))
        arg_buffer = ctypes.create_string_buffer(args, len(args))
        arg_size = ctypes.c_size_t(len(args))
        extra = (ctypes.c_void_p * 5)(
            LAUNCH_PARAM_BUFFER_POINTER,
            ctypes.addressof(arg_buffer),
            LAUNCH_PARAM_BUFFER_SIZE,
            ctypes.addressof(arg_size),
            LAUNCH_PARAM_END,
        )
        grid, block = v.launch.grid, v.launch.block
        check(
            hip.hipModuleLaunchKernel(v.function, *grid, *block, v.launch.shared_bytes, None, None, extra),
            f"hipModuleLaunchKernel({v.symbol})",
        )
        self.launches.append({"variant": v.name, "symbol": v.symbol, "stage": stage, "buffer": buffer_index})


def _event_ms(start: Any, stop: Any) -> float:
    hip = _hip()
    check(hip.hipEventSynchronize(stop), "hipEventSynchronize")
    return float(check(hip.hipEventElapsedTime(start, stop), "hipEventElapsedTime"))


def run(task: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Load, parity-check, warm up and time every variant interleaved; returns the result document."""
    hip = _hip()
    harness = Harness(task, workdir)
    props = device_props(int(task.get("ordinal", 0)))
    phase, fmt = task["phase"], task["format"]
    n, k, m, seed = int(task["n"]), int(task["k"]), int(task["m"]), int(task.get("seed", 0))
    family = family_for_phase(phase)
    harness.progress(stage="problem")
    rows = sample_rows(n, PARITY_SAMPLE_ROWS, seed) if n * k > PARITY_SAMPLE_ABOVE else None
    problem = build_problem(fmt, n, k, m, seed=seed, rows=rows)
    arrays = weight_arrays(problem)
    copy_bytes = sum(int(a.nbytes) for a in arrays.values())
    cache = llc_bytes(props.arch, props.l2_bytes)
    copies = weight_copies(copy_bytes, cache, bool(task.get("warm_cache")))
    memory = DeviceMemory()
    errors: dict[str, str] = {}
    parity: dict[str, dict[str, Any]] = {}
    try:
        weights = [{name: memory.upload(a) for name, a in arrays.items()} for _ in range(copies)]
        x_ptr = memory.upload(np.ascontiguousarray(problem.x, dtype=np.float32))
        y_ptr = memory.alloc(4 * m * n)
        loaded: list[LoadedVariant] = []
        for entry in task["variants"]:
            name, symbol = entry["name"], entry["symbol"]
            harness.progress(stage="load", variant=name)
            try:
                variant = family.parse(name, "rocm")
                launch = launch_for(phase, variant, n, k, m, props.compute_units)
                function = harness.function(entry["path"], symbol)
            except Exception as exc:  # one bad variant must not sink the task
                errors[name] = f"load failed: {type(exc).__name__}: {exc}"
                continue
            lv = LoadedVariant(name, symbol, function, launch)
            if launch.workspace_bytes:
                lv.workspace = memory.alloc(launch.workspace_bytes)
            if launch.counters:
                lv.counters = memory.alloc(4 * launch.counters)
                check(hip.hipMemsetD32(lv.counters, 0, launch.counters), "hipMemsetD32(counters)")
            loaded.append(lv)

        def pointers(lv: LoadedVariant, buffer_index: int) -> dict[str, int]:
            return {**weights[buffer_index], "x": x_ptr, "y": y_ptr, "workspace": lv.workspace,
                    "counters": lv.counters}  # fmt: skip

        good: list[LoadedVariant] = []
        for lv in loaded:
            harness.progress(stage="parity", variant=lv.name)
            try:
                check(hip.hipMemsetD32(y_ptr, NAN_BITS, m * n), "hipMemsetD32(y, NaN)")
                harness.launch(lv, pointers(lv, 0), "parity", 0)
                check(hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
                out = np.empty((m, n), dtype=np.float32)
                check(hip.hipMemcpyDtoH(out, y_ptr, out.nbytes), "hipMemcpyDtoH")
            except Exception as exc:
                errors[lv.name] = f"parity run failed: {type(exc).__name__}: {exc}"
                continue
            result = problem.check(out, INT8_ACTIVATIONS)
            parity[lv.name] = dict(result.__dict__)
            good.append(lv)

        start = check(hip.hipEventCreate(), "hipEventCreate")
        stop = check(hip.hipEventCreate(), "hipEventCreate")

        def dispatcher(lv: LoadedVariant) -> Any:
            def fn(buffer_index: int) -> int:
                check(hip.hipEventRecord(start, None), "hipEventRecord")
                harness.launch(lv, pointers(lv, buffer_index), "timed", buffer_index)
                check(hip.hipEventRecord(stop, None), "hipEventRecord")
                return round(_event_ms(start, stop) * 1e6)

            return fn

        harness.progress(stage="interleave", variants=[lv.name for lv in good])
        timed = interleave(
            [(lv.name, dispatcher(lv)) for lv in good],
            rounds=int(task["rounds"]),
            warmup=int(task.get("warmup", 0)),
            buffers=copies,
            policy=_race_policy(task, [lv.name for lv in good if parity.get(lv.name, {}).get("passed")]),
        )
        errors.update(timed.errors)
        harness.progress(stage="done")
        for event in (start, stop):
            hip.hipEventDestroy(event)
    finally:
        memory.free()
    # warm-up launches precede the timed ones of a variant: mark them so the log says what it was
    per_variant: dict[str, list[dict[str, Any]]] = {}
    for entry in harness.launches:
        per_variant.setdefault(entry["variant"], []).append(entry)
    for name, entries in per_variant.items():
        timed_count = len(timed.dispatches.get(name, []))
        candidates = [e for e in entries if e["stage"] == "timed"]
        for e in candidates[: len(candidates) - timed_count]:
            e["stage"] = "warmup"
    return {
        "device": props.as_dict(),
        "weight_copies": copies,
        "cache_bytes": cache,
        "launches": harness.launches,
        "variants": {
            name: {
                "dispatches": [d.__dict__ for d in timed.dispatches.get(name, [])],
                "parity": parity.get(name),
                "error": errors.get(name),
            }
            for name in [v["name"] for v in task["variants"]]
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


def _race_policy(task: dict[str, Any], eligible: list[str]) -> RacingPolicy | None:
    """The same racing policy the parent would build, from the task document (None when exhaustive)."""
    spec = TaskSpec(
        arch=str(task["arch"]), phase=str(task["phase"]), format=str(task["format"]), shape="",
        n=int(task["n"]), k=int(task["k"]), m=int(task["m"]), variants=(),
        min_dispatches=int(task.get("min_dispatches", task["rounds"])),
        max_dispatches=int(task.get("max_dispatches", task["rounds"])),
        seed=int(task.get("seed", 0)), strategy=str(task.get("strategy", "exhaustive")),
    )  # fmt: skip
    return policy_for(spec, eligible=eligible)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

