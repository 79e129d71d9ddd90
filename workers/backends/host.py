"""The host (CPU) backend: primitives for the runner, for any package with a host C source.

It runs everywhere (CI included), so it is the backend that proves the whole pipeline end to end. A
package's host source is compiled with ``cc`` into one shared library per compile unit (all variants in one
unit when the package names template instantiations), next to a generated timing shim: one C function per
variant that reads CLOCK_MONOTONIC_RAW around the kernel call, so the per-dispatch clock excludes the ctypes
call overhead.
Libraries live in a content-addressed cache keyed by package version, defines, compiler identity and flags.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from kernels.arches import get_arch
from kernels.families.base import Variant
from kernels.packages.build import CompileUnit, compile_units
from kernels.packages.loader import INCLUDE_DIR, package_for
from kernels.packages.manifest import ArgSpec
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
from workers.compilers.lock import unit_lock
from workers.harness.interleave import DispatchFn
from workers.runner import ArgValue, CompiledVariants, Prelaunch, parse_variants, run_task

DEFAULT_FLAGS: tuple[str, ...] = ("-O3", "-std=c11", "-fPIC", "-shared")  # no -march=native: portable results
COMPILE_TIMEOUT_S = 120
PROBE_TIMEOUT_S = 10
_C_TYPES = {"ptr": "void *", "i32": "int32_t", "u32": "uint32_t", "i64": "int64_t", "f32": "float"}
_CTYPES: dict[str, Any] = {
    "ptr": ctypes.c_void_p, "i32": ctypes.c_int32, "u32": ctypes.c_uint32, "i64": ctypes.c_int64,
    "f32": ctypes.c_float,
}  # fmt: skip


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def cpu_model() -> str:
    """CPU model string from /proc/cpuinfo (x86 ``model name``, else ARM-ish fields)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for key in ("model name", "Model", "cpu model", "Hardware"):
        for line in text.splitlines():
            if line.split(":", 1)[0].strip() == key and ":" in line:
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def llc_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int:
    """Size of the highest cache level of cpu0 (largest when a level has several); 0 if unknown."""
    best_level, best_size = -1, 0
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text().strip())
            size = _parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if level > best_level or (level == best_level and size > best_size):
            best_level, best_size = level, size
    return best_size


def _parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def arg_kinds(args: list[ArgSpec]) -> list[str]:
    """The C-level kind of each argument (what the shim declares and ctypes passes)."""
    kinds = []
    for arg in args:
        if arg.role in ("weights", "x", "y", "workspace", "gguf"):
            kinds.append("ptr")
        elif arg.role == "scalar":
            kinds.append({"f32": "f32", "i64": "i64", "u32": "u32"}.get(arg.dtype or "i32", "i32"))
        else:
            kinds.append("i32")
    return kinds


def timing_shim(symbols: list[str], kinds: list[str]) -> str:
    """C source of ``int64_t tb_timed_<symbol>(args...)``: the kernel call between two raw clock reads.

    A separate translation unit, so its prototype of the kernel (void pointers) never meets the package's
    own declaration; pointer arguments are ABI-identical either way.
    """
    params = ", ".join(f"{_C_TYPES[k]} a{i}" for i, k in enumerate(kinds)) or "void"
    call = ", ".join(f"a{i}" for i in range(len(kinds)))
    proto = ", ".join(_C_TYPES[k] for k in kinds) or "void"
    lines = [
        "#define _POSIX_C_SOURCE 199309L",
        "#include <stdint.h>",
        "#include <time.h>",
        "#ifdef CLOCK_MONOTONIC_RAW",
        "#define TB_CLOCK CLOCK_MONOTONIC_RAW",
        "#else",
        "#define TB_CLOCK CLOCK_MONOTONIC",
        "#endif",
        "static int64_t tb_now(void) { struct timespec t; clock_gettime(TB_CLOCK, &t);"
        " return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }",
    ]
    for symbol in symbols:
        lines += [
            f"extern void {symbol}({proto});",
            f"int64_t tb_timed_{symbol}({params}) {{",
            f"    const int64_t t0 = tb_now(); {symbol}({call}); return tb_now() - t0;",
            "}",
        ]
    return "\n".join(lines) + "\n"


class HostDevice:
    """Runner primitives on the CPU: buffers are numpy arrays, launches are ctypes calls."""

    def __init__(self, facts: DeviceFacts, llc: int) -> None:
        self.facts = facts
        self.llc_bytes = llc
        self._buffers: dict[int, np.ndarray] = {}

    def alloc(self, nbytes: int) -> int:
        array = np.zeros(max(1, nbytes), dtype=np.uint8)
        self._buffers[array.ctypes.data] = array
        return int(array.ctypes.data)

    def upload(self, array: np.ndarray) -> int:
        ptr = self.alloc(int(array.nbytes))
        ctypes.memmove(ptr, array.ctypes.data, int(array.nbytes))
        return ptr

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def zero(self, ptr: int, nbytes: int) -> None:
        ctypes.memset(ptr, 0, nbytes)

    def fill_nan_f32(self, ptr: int, count: int) -> None:
        np.ctypeslib.as_array((ctypes.c_float * count).from_address(ptr)).fill(np.nan)

    def download(self, ptr: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * count).from_address(ptr))
        return raw.view(dtype).reshape(shape).copy()

    def launch(self, kernel: Any, geometry: Geometry, args: list[ArgValue]) -> None:
        kernel.call(*(value for _, value in args))

    def launch_overlapped(
        self, pre: Prelaunch, kernel: Any, geometry: Geometry, args: list[ArgValue]
    ) -> None:
        """The host runs the two in turn (overlap is a CUDA launch mode)."""
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
        timed = kernel.timed
        timed_pre = None if pre is None else pre.kernel.timed
        values = [[value for _, value in args] for args in args_by_copy]

        def dispatch(buffer_index: int) -> int:
            ns = 0 if timed_pre is None else int(timed_pre(*values[buffer_index]))
            return ns + int(timed(*values[buffer_index]))

        return dispatch

    @contextmanager
    def timing(self) -> Iterator[None]:
        yield

    def attach(self, dispatches: dict[str, list[Dispatch]]) -> dict[str, str]:
        return {name: "host-clock" for name, rows in dispatches.items() if rows}

    def resources(self, kernel: Any, geometry: Geometry) -> dict[str, object]:
        return {}  # a CPU function has no register/LDS report

    def free_all(self) -> None:
        self._buffers.clear()


PREPARE_KINDS = ["ptr", "ptr", "i32", "i32"]  # (const uint8_t *gguf, void *out, int n, int k)


class HostKernel:
    """A loaded host variant: the kernel itself (parity runs) and its timing shim (None for prepare)."""

    def __init__(self, lib: ctypes.CDLL, symbol: str, kinds: list[str]) -> None:
        argtypes = [_CTYPES[k] for k in kinds]
        self.call = getattr(lib, symbol)
        self.call.restype = None
        self.call.argtypes = argtypes
        self.timed = getattr(lib, f"tb_timed_{symbol}", None)
        if self.timed is not None:
            self.timed.restype = ctypes.c_int64
            self.timed.argtypes = argtypes


class HostBackend:
    """Compiles a package's host source with ``cc`` and runs tasks through the runner."""

    name: str = "host"

    def __init__(self, artifact_dir: Path, cc: str = "cc", flags: tuple[str, ...] = DEFAULT_FLAGS) -> None:
        self.artifact_dir = Path(artifact_dir)
        self.cc = cc
        self.flags = tuple(flags)
        self._libs: dict[str, ctypes.CDLL] = {}  # keep loaded libraries alive per path

    @cached_property
    def toolchain(self) -> str:
        """Full ``cc --version`` output (compiler identity and version); '' when cc is missing."""
        path = shutil.which(self.cc)
        if path is None:
            return ""
        try:
            proc = _run([path, "--version"], PROBE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def detect(self) -> DeviceInfo | None:
        """The CPU, or None when no C compiler is available (nothing could be built)."""
        if not self.toolchain:
            return None
        model = cpu_model()
        uid = hashlib.sha256(f"{socket.gethostname()}\0{model}".encode()).hexdigest()[:32]
        return DeviceInfo(
            backend="host",
            arch="host",
            name=model,
            compute_units=os.cpu_count() or 1,
            uuid=uid,
            driver_version=platform.release(),
            runtime_version=self.toolchain.splitlines()[0],
        )

    def supports(self, arch: str, phase: str, format_name: str) -> str | None:
        if get_arch(arch).backend != "host":
            return f"host backend runs arch 'host' only, not {arch!r}"
        return None

    # -- compilation ----------------------------------------------------------------

    def unit_key(self, package: KernelPackage, unit: CompileUnit) -> str:
        blob = json.dumps(
            {
                "package": package.version,
                "source": unit.source.name,
                "defines": unit.defines,
                "symbols": sorted(self._unit_symbols(package, unit)),
                "kinds": arg_kinds(package.args_for("host")),
                "compiler": self.cc,
                "toolchain": self.toolchain,
                "flags": list(self.flags),
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    @staticmethod
    def _unit_symbols(package: KernelPackage, unit: CompileUnit) -> set[str]:
        """Every symbol the timing shim wraps: the variants' and their prelaunch kernels'."""
        return set(unit.symbols(package).values()) | set(unit.prelaunch_symbols(package, "host").values())

    def compile_unit(self, package: KernelPackage, unit: CompileUnit) -> tuple[Path, bool, str]:
        """(library path, ok, log); never raises for compiler failures."""
        key = self.unit_key(package, unit)
        out_dir = self.artifact_dir / key[:2]
        lib_path = out_dir / f"{package.name}_{key[:24]}.so"
        if lib_path.is_file():
            return lib_path, True, ""
        if not self.toolchain:
            return lib_path, False, f"C compiler {self.cc!r} not found"
        out_dir.mkdir(parents=True, exist_ok=True)
        with unit_lock(lib_path.with_suffix(".lock")):  # one compiler per unit on this host
            if lib_path.is_file():  # the one we waited for built it
                return lib_path, True, ""
            return self._compile_locked(package, unit, lib_path)

    def _compile_locked(
        self, package: KernelPackage, unit: CompileUnit, lib_path: Path
    ) -> tuple[Path, bool, str]:
        out_dir = lib_path.parent
        with tempfile.TemporaryDirectory(dir=out_dir) as private:
            shim = Path(private) / "tb_timing_shim.c"
            kinds = arg_kinds(package.args_for("host"))
            shim.write_text(timing_shim(sorted(self._unit_symbols(package, unit)), kinds))
            tmp = Path(private) / "out.so"
            argv = [
                self.cc, *self.flags, *(f"-D{k}={v}" for k, v in sorted(unit.defines.items())),
                f"-I{unit.source.parent}", f"-I{INCLUDE_DIR}", "-o", str(tmp), str(unit.source), str(shim),
                "-lm",
            ]  # fmt: skip
            try:
                proc = _run(argv, COMPILE_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return lib_path, False, f"{' '.join(argv)}\n{type(exc).__name__}: {exc}"
            log = (" ".join(argv) + "\n" + proc.stdout + proc.stderr).strip()
            if proc.returncode != 0:
                return lib_path, False, log
            os.replace(tmp, lib_path)  # atomic: concurrent workers never load a half-written file
        return lib_path, True, log

    def precompile(
        self, package: KernelPackage, arch: str, format_name: str, variants: list[Variant]
    ) -> list[UnitCompile]:
        """The compile queue's work: the units ``build`` will need, into the shared cache."""
        out = []
        for unit in compile_units(package, format_name, "host", variants):
            started = time.monotonic()
            path, ok, log = self.compile_unit(package, unit)
            seconds = round(time.monotonic() - started, 3)
            out.append(UnitCompile(path.name, self.unit_key(package, unit), len(unit.variants), ok, bool(log),
                                   seconds if log else 0.0, log="" if ok else log))  # fmt: skip
        return out

    def build(self, package: KernelPackage, format_name: str, variants: list[Variant]) -> CompiledVariants:
        """Compile (through the cache) and load every variant; failures become per-variant errors."""
        units = compile_units(package, format_name, "host", variants)
        keys = [self.unit_key(package, u) for u in units]
        artifact = ArtifactInfo(
            cache_key=hashlib.sha256("".join(keys).encode()).hexdigest() if keys else "",
            path="",
            source_hash=package.version,
            toolchain=self.toolchain,
            flags=self.flags,
            compiled=False,
        )
        compiled = CompiledVariants(artifact)
        kinds = arg_kinds(package.args_for("host"))
        logs = []
        for unit in units:
            path, ok, log = self.compile_unit(package, unit)
            artifact.compiled |= bool(log)
            artifact.path = artifact.path or str(path)
            if log:
                logs.append(log)
            for variant in unit.variants:
                symbol = package.symbol(variant)
                compiled.symbols[variant.name] = symbol
                artifact.resources.setdefault(symbol, {})
                if not ok:
                    compiled.errors[variant.name] = f"compile failed: {log}"
                    continue
                try:
                    compiled.kernels[variant.name] = HostKernel(self._load(path), symbol, kinds)
                    pre = unit.prelaunch_symbols(package, "host").get(variant.name)
                    if pre is not None:
                        compiled.prelaunch[variant.name] = HostKernel(self._load(path), pre, kinds)
                except (OSError, AttributeError) as exc:
                    compiled.errors[variant.name] = f"load failed: {exc}"
        prepare = package.manifest.prepare
        if prepare is not None and artifact.path and Path(artifact.path).is_file():
            try:
                compiled.prepare = HostKernel(self._load(Path(artifact.path)), prepare.symbol, PREPARE_KINDS)
            except AttributeError as exc:
                logs.append(f"prepare kernel {prepare.symbol}: {exc}")
        artifact.ok = not compiled.errors
        artifact.log = "\n".join(logs)
        if not units:
            artifact.ok, artifact.log = False, f"package {package.name} has no host source"
            for variant in variants:
                compiled.errors[variant.name] = artifact.log
        return compiled

    def _load(self, path: Path) -> ctypes.CDLL:
        lib = self._libs.get(str(path))
        if lib is None:
            lib = self._libs[str(path)] = ctypes.CDLL(str(path))
        return lib

    # -- the task -----------------------------------------------------------------

    def run_task(self, spec: TaskSpec, progress: ProgressCallback | None = None) -> TaskResult:
        """Compile, check parity of, and time every variant of one task, interleaved (the runner)."""
        reason = self.supports(spec.arch, spec.phase, spec.format)
        if reason is not None:
            raise ValueError(reason)
        package = package_for(spec.phase, spec.kernel_root, spec.kernel)
        device = self.detect() or DeviceInfo("host", "host", cpu_model(), os.cpu_count() or 1, "", "", "")
        variants, _rejected = parse_variants(package, spec, "host")  # the runner reports the rejected
        compiled = self.build(package, spec.format, variants)
        host = get_arch("host")
        facts = DeviceFacts("host", "host", device.compute_units, host.wave)
        return run_task(
            package, spec, HostDevice(facts, llc_bytes() or host.llc_bytes), device, compiled, progress
        )
