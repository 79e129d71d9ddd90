"""Thin, checked wrappers over cuda-python's driver and NVRTC bindings.

cuda-python is optional (CI has no GPU and does not install it): importing this
module never fails; ``available()`` says whether the bindings are present and
``require()`` raises a clear error when they are not. Both binding layouts are
accepted: ``cuda.bindings.{driver,nvrtc}`` (cuda-python >= 12.6) and the older
``cuda.{cuda,nvrtc}``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

driver: Any = None
nvrtc: Any = None
IMPORT_ERROR = ""
try:  # pragma: no cover - depends on the machine
    from cuda.bindings import driver as _driver
    from cuda.bindings import nvrtc as _nvrtc

    driver, nvrtc = _driver, _nvrtc
except ImportError as _exc:  # pragma: no cover
    try:
        from cuda import cuda as _driver_old  # type: ignore[attr-defined,no-redef]
        from cuda import nvrtc as _nvrtc_old  # type: ignore[attr-defined,no-redef]

        driver, nvrtc = _driver_old, _nvrtc_old
    except ImportError:
        IMPORT_ERROR = f"cuda-python is not installed ({_exc})"

NAN_F32_BITS = 0x7FC00000


class CudaError(RuntimeError):
    """A driver or NVRTC call returned an error code."""


def available() -> bool:
    return driver is not None


def require() -> None:
    if driver is None:
        raise CudaError(IMPORT_ERROR or "cuda-python is not installed")


def check(result: Any, what: str = "") -> Any:
    """Unwrap cuda-python's ``(err, *values)`` tuples; raise CudaError with the error's name."""
    err, *values = result if isinstance(result, tuple) else (result,)
    code = int(err)
    if code != 0:
        name = getattr(err, "name", str(code))
        detail = ""
        if driver is not None and isinstance(err, driver.CUresult):
            ok, text = driver.cuGetErrorString(err)
            if int(ok) == 0 and text:
                detail = f": {text.decode(errors='replace')}"
        raise CudaError(f"{what or 'CUDA call'} failed with {name}{detail}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def package_version() -> str:
    """Version of the cuda-python bindings in use ('' when absent)."""
    try:
        from importlib.metadata import version

        for name in ("cuda-bindings", "cuda-python"):
            try:
                return f"{name} {version(name)}"
            except Exception:
                continue
    except Exception:  # pragma: no cover
        pass
    return ""


@dataclass
class Context:
    """The primary context of one device, made current on this thread."""

    device: Any
    context: Any
    ordinal: int

    @classmethod
    def open(cls, ordinal: int = 0) -> Context:
        require()
        check(driver.cuInit(0), "cuInit")
        device = check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
        ctx = check(driver.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
        check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        return cls(device, ctx, ordinal)

    def make_current(self) -> None:
        check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def attribute(self, name: str) -> int:
        attr = getattr(driver.CUdevice_attribute, name)
        return int(check(driver.cuDeviceGetAttribute(attr, self.device), f"cuDeviceGetAttribute({name})"))

    def name(self) -> str:
        raw = check(driver.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        return bytes(raw).split(b"\0", 1)[0].decode(errors="replace").strip()

    def uuid(self) -> str:
        uid = check(driver.cuDeviceGetUuid(self.device), "cuDeviceGetUuid")
        return bytes(uid.bytes).hex()

    def driver_version(self) -> int:
        return int(check(driver.cuDriverGetVersion(), "cuDriverGetVersion"))

    def total_memory(self) -> int:
        return int(check(driver.cuDeviceTotalMem(self.device), "cuDeviceTotalMem"))


def mem_alloc(nbytes: int) -> int:
    return int(check(driver.cuMemAlloc(max(1, nbytes)), f"cuMemAlloc({nbytes})"))


def mem_free(ptr: int) -> None:
    check(driver.cuMemFree(ptr), "cuMemFree")


def htod(dst: int, src: Any, nbytes: int) -> None:
    """Copy ``nbytes`` from a host buffer (numpy array, contiguous) to device memory."""
    check(driver.cuMemcpyHtoD(dst, src.ctypes.data, nbytes), "cuMemcpyHtoD")


def dtoh(dst: Any, src: int, nbytes: int) -> None:
    check(driver.cuMemcpyDtoH(dst.ctypes.data, src, nbytes), "cuMemcpyDtoH")


def dtod(dst: int, src: int, nbytes: int) -> None:
    check(driver.cuMemcpyDtoD(dst, src, nbytes), "cuMemcpyDtoD")


def fill_nan_f32(ptr: int, count: int) -> None:
    """Poison an FP32 buffer: a kernel that skips part of its output then fails parity."""
    check(driver.cuMemsetD32(ptr, NAN_F32_BITS, count), "cuMemsetD32")


def synchronize() -> None:
    check(driver.cuCtxSynchronize(), "cuCtxSynchronize")


def pack_args(values: list[tuple[str, int | float]]) -> tuple[bytes, list[int]]:
    """Pack kernel arguments; returns (backing buffer, offsets) for ``launch``.

    ``values`` is a list of (kind, value) with kind 'ptr' (64-bit), 'i32' or 'f32'.
    """
    fmt = {"ptr": "Q", "i32": "i", "u32": "I", "i64": "q", "f32": "f"}
    blob = b""
    offsets: list[int] = []
    for kind, value in values:
        size = struct.calcsize(fmt[kind])
        while len(blob) % size:
            blob += b"\0"
        offsets.append(len(blob))
        blob += struct.pack(fmt[kind], value)
    return blob, offsets


class KernelArgs:
    """A kernel parameter block kept alive for as many launches as needed (no per-launch packing)."""

    def __init__(self, values: list[tuple[str, int | float]]) -> None:
        import numpy as np

        blob, offsets = pack_args(values)
        self._blob = np.frombuffer(bytearray(blob or b"\0"), dtype=np.uint8).copy()
        base = self._blob.ctypes.data
        self._ptrs = np.array([base + off for off in offsets], dtype=np.uint64)
        self.params: Any = self._ptrs if offsets else 0  # what cuLaunchKernel takes as kernelParams


def launch(
    function: Any,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: KernelArgs,
    shared_bytes: int = 0,
    stream: Any = 0,
) -> None:
    check(
        driver.cuLaunchKernel(function, *grid, *block, shared_bytes, stream, args.params, 0),
        "cuLaunchKernel",
    )


def launch_dependent(
    function: Any,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: KernelArgs,
    shared_bytes: int,
    stream: Any,
) -> None:
    """A programmatic dependent launch (sm_90): the kernel may start once every block of the previous
    kernel in ``stream`` has executed ``griddepcontrol.launch_dependents`` (or exited); it sees that kernel's
    writes only after its own ``griddepcontrol.wait``."""
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared_bytes
    config.hStream = stream
    attribute = driver.CUlaunchAttribute()
    attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attribute.value.programmaticStreamSerializationAllowed = 1
    config.attrs = [attribute]
    config.numAttrs = 1
    check(driver.cuLaunchKernelEx(config, function, args.params, 0), "cuLaunchKernelEx")


@dataclass
class GraphStep:
    function: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    dependent: bool = False  # a programmatic dependent launch on the step before it


class LaunchGraph:
    """Kernel launches captured once into an executable CUDA graph, replayed by one ``cuGraphLaunch``.

    Why: a programmatic dependent launch only overlaps its predecessor when both are queued before the
    first one runs; launched one by one from Python, the second arrives microseconds after the first
    ended. A graph queues them together, as an engine's CUDA graph does.
    """

    def __init__(self, steps: list[GraphStep], args: KernelArgs) -> None:
        flags = driver.CUstream_flags.CU_STREAM_NON_BLOCKING
        stream = check(driver.cuStreamCreate(flags), "cuStreamCreate")
        graph = None
        try:
            mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            check(driver.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")
            try:
                for step in steps:
                    if step.dependent:
                        launch_dependent(
                            step.function, step.grid, step.block, args, step.shared_bytes, stream
                        )
                    else:
                        launch(step.function, step.grid, step.block, args, step.shared_bytes, stream)
            finally:
                graph = check(driver.cuStreamEndCapture(stream), "cuStreamEndCapture")
            self.exec = check(driver.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        finally:
            if graph is not None:
                driver.cuGraphDestroy(graph)
            driver.cuStreamDestroy(stream)

    def launch(self, stream: Any = 0) -> None:
        check(driver.cuGraphLaunch(self.exec, stream), "cuGraphLaunch")

    def close(self) -> None:
        driver.cuGraphExecDestroy(self.exec)
