"""FAKE `hip.hip` (hip-python's module), only for tests: the one place the HIP runtime is replaced.

It mimics hip-python's calling convention (every call returns a tuple whose first item is a
hipError_t) over host memory, and "runs" a kernel by decoding the packed argument buffer that
the harness passed through ``extra`` and computing the GEMV from the weights at the pointers it
names. Launch records (symbol, grid, block, decoded arguments, raw buffer) are appended to
$FAKE_HIP_LOG. $FAKE_HIP_CRASH / $FAKE_HIP_HANG / $FAKE_HIP_PARTIAL name a symbol that dies,
hangs, or writes only half of its output.
"""

from __future__ import annotations

import ctypes
import enum
import json
import os
import struct
import time
from typing import Any

import numpy as np

from kernels.formats.packed import PackedWeights, dequantize_packed
from kernels.packages.loader import builtin_packages
from workers.compilers.codeobject import BUNDLE_MAGIC, function_symbols, unbundle


class hipError_t(enum.IntEnum):  # hip-python's names
    hipSuccess = 0
    hipErrorInvalidValue = 1
    hipErrorOutOfMemory = 2
    hipErrorNotFound = 500
    hipErrorInvalidImage = 200


class hipDeviceProp_t:
    def __init__(self) -> None:
        self.name = b""
        self.gcnArchName = b""
        self.multiProcessorCount = 0
        self.l2CacheSize = 0
        self.pciBusID = 0
        self.pciDeviceID = 0


_MEMORY: dict[int, np.ndarray] = {}  # device pointer -> uint8 storage
_NEXT = [0x7F0000000000]
_MODULES: dict[int, set[str]] = {}
_OK = hipError_t.hipSuccess


def _buffer(ptr: Any) -> np.ndarray:
    return _MEMORY[int(ptr)]


def hipGetDeviceProperties(props: hipDeviceProp_t, ordinal: int) -> tuple[hipError_t]:
    props.name = b"AMD Instinct MI50/MI60 (FAKE)"
    props.gcnArchName = (os.environ.get("FAKE_HIP_ARCH", "gfx906") + ":sramecc+:xnack-").encode()
    props.multiProcessorCount = int(os.environ.get("FAKE_HIP_CUS", "60"))
    props.l2CacheSize = 4 << 20
    props.pciBusID, props.pciDeviceID = 3, 0x66A1
    return (_OK,)


def hipRuntimeGetVersion() -> tuple[hipError_t, int]:
    return (_OK, 50731921)


def hipDriverGetVersion() -> tuple[hipError_t, int]:
    return (_OK, 50731921)


def hipMalloc(size: int) -> tuple[hipError_t, int]:
    ptr = _NEXT[0]
    _NEXT[0] += (int(size) + 0xFFFF) & ~0xFFFF
    _MEMORY[ptr] = np.zeros(int(size), dtype=np.uint8)
    return (_OK, ptr)


def hipFree(ptr: int) -> tuple[hipError_t]:
    _MEMORY.pop(int(ptr), None)
    return (_OK,)


def hipMemcpyHtoD(dst: int, src: np.ndarray, size: int) -> tuple[hipError_t]:
    _buffer(dst)[:size] = np.frombuffer(np.ascontiguousarray(src).tobytes(), dtype=np.uint8)[:size]
    return (_OK,)


def hipMemcpyDtoH(dst: np.ndarray, src: int, size: int) -> tuple[hipError_t]:
    dst.view(np.uint8).reshape(-1)[:size] = _buffer(src)[:size]
    return (_OK,)


def hipMemcpyDtoD(dst: int, src: int, size: int) -> tuple[hipError_t]:
    _buffer(dst)[:size] = _buffer(src)[:size]
    return (_OK,)


def hipMemset(dst: int, value: int, size: int) -> tuple[hipError_t]:
    _buffer(dst)[:size] = np.uint8(value)
    return (_OK,)


def hipMemsetD32(dst: int, value: int, count: int) -> tuple[hipError_t]:
    _buffer(dst)[: 4 * count].view(np.uint32)[:] = np.uint32(value)
    _log({"call": "hipMemsetD32", "ptr": int(dst), "value": int(value), "count": int(count)})
    return (_OK,)


def hipDeviceSynchronize() -> tuple[hipError_t]:
    return (_OK,)


def hipModuleLoadData(image: bytes) -> tuple[hipError_t, int | None]:
    data = bytes(image)
    if data.startswith(BUNDLE_MAGIC):
        elfs = [b for b in unbundle(data).values() if b.startswith(b"\x7fELF")]
    elif data.startswith(b"\x7fELF"):
        elfs = [data]
    else:
        return (hipError_t.hipErrorInvalidImage, None)
    handle = len(_MODULES) + 1
    _MODULES[handle] = set().union(*(function_symbols(e) for e in elfs))
    return (_OK, handle)


def hipModuleGetFunction(module: int, name: bytes) -> tuple[hipError_t, str | None]:
    symbol = name.decode()
    if symbol not in _MODULES.get(module, set()):
        return (hipError_t.hipErrorNotFound, None)
    return (_OK, symbol)


class _Event:
    ns = 0


def hipEventCreate() -> tuple[hipError_t, _Event]:
    return (_OK, _Event())


def hipEventRecord(event: _Event, stream: Any) -> tuple[hipError_t]:
    event.ns = time.perf_counter_ns()
    return (_OK,)


def hipEventSynchronize(event: _Event) -> tuple[hipError_t]:
    return (_OK,)


def hipEventElapsedTime(start: _Event, stop: _Event) -> tuple[hipError_t, float]:
    return (_OK, (stop.ns - start.ns) / 1e6)


def hipEventDestroy(event: _Event) -> tuple[hipError_t]:
    return (_OK,)


def _log(record: dict[str, Any]) -> None:
    path = os.environ.get("FAKE_HIP_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")


def _decode_args(phase: str, raw: bytes) -> dict[str, int]:
    """Read the buffer back with the natural-alignment rule (8-byte pointers, 4-byte ints), in the order
    of the built-in package's manifest [[args]] for rocm (named by part, name or role)."""
    package = builtin_packages()["tb-decode" if phase == "decode" else "tb-prefill"]
    values: dict[str, int] = {}
    offset = 0
    for arg in package.args_for("rocm"):
        pointer = arg.role in ("weights", "x", "y", "workspace")
        size = 8 if pointer else 4
        offset += -offset % size
        values[arg.part or arg.name or arg.role] = struct.unpack_from("<Q" if pointer else "<i", raw, offset)[
            0
        ]
        offset += size
    return values


def hipModuleLaunchKernel(
    f: str,
    gx: int,
    gy: int,
    gz: int,
    bx: int,
    by: int,
    bz: int,
    shared: int,
    stream: Any,
    params: Any,
    extra: Any,
) -> tuple[hipError_t]:
    words = [int(w or 0) for w in extra]  # (c_void_p * 5): BUFFER_POINTER, buf, BUFFER_SIZE, &size, END
    if params is not None or words[0] != 1 or words[2] != 2 or words[4] != 3:
        return (hipError_t.hipErrorInvalidValue,)
    size = ctypes.c_size_t.from_address(words[3]).value
    raw = ctypes.string_at(words[1], size)
    phase = "decode" if f.startswith("tb_decode") else "prefill"
    args = _decode_args(phase, raw)
    _log({"call": "launch", "symbol": f, "grid": [gx, gy, gz], "block": [bx, by, bz], "shared": shared,
          "args": args, "raw": raw.hex()})  # fmt: skip
    if f == os.environ.get("FAKE_HIP_CRASH"):
        os._exit(139)
    if f == os.environ.get("FAKE_HIP_HANG"):
        time.sleep(3600)
    m, n, k = args["m"], args["n"], args["k"]
    qs = _buffer(args["qs"]).view(np.int8)[: n * k].reshape(n, k)
    scales_u8 = _buffer(args["scales"])
    groups = scales_u8.size // 2 // n
    scales = scales_u8.view(np.float16)[: n * groups].reshape(n, groups)
    mins = _buffer(args["mins"]).view(np.float16)[: n * groups].reshape(n, groups) if args["mins"] else None
    w = dequantize_packed(PackedWeights(qs, scales, mins, k // groups))
    x = _buffer(args["x"]).view(np.float32)[: m * k].reshape(m, k)
    y = (x.astype(np.float64) @ w.T.astype(np.float64)).astype(np.float32)
    out = _buffer(args["y"]).view(np.float32)[: m * n].reshape(m, n)
    rows = n // 2 if f == os.environ.get("FAKE_HIP_PARTIAL") else n
    out[:, :rows] = y[:, :rows]
    return (_OK,)
