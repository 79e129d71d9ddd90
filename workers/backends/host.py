"""The host (CPU) backend: C decode (GEMV) and prefill (GEMM) kernels built with ``cc``, timed in C.

It runs everywhere (CI included), so it is the backend that proves the whole
pipeline end to end. Kernels read the packed kernel layout (kernels/formats/packed.py)
and quantise activations to int8 per 32-block like the GPU kernels, so every first-wave
format runs through one source per family. One shared library per (family, format kind)
holds every host variant as its own symbol; libraries live in a content-addressed cache
keyed by source (+ included headers), family, kind, variant list, compiler identity and
flags (DESIGN §5.6).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import platform
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

import numpy as np

from kernels.families.abi import symbol as kernel_symbol
from kernels.families.base import InvalidVariant, KernelFamily, Variant
from kernels.families.decode import DecodeFamily
from kernels.families.prefill import PrefillFamily
from kernels.formats.packed import PackedWeights
from kernels.formats.packing import PACKABLE, format_kind
from kernels.reference import INT8_ACTIVATIONS, Problem, build_problem, sample_rows
from workers.backends.base import (
    ArtifactInfo,
    DeviceInfo,
    Parity,
    ProgressCallback,
    TaskResult,
    TaskSpec,
    VariantResult,
)
from workers.compilers.cache import source_hash as closure_hash
from workers.harness.interleave import DispatchFn, interleave_task

HOST_SOURCES = Path(__file__).resolve().parents[2] / "kernels" / "sources" / "host"
DEFAULT_SOURCE = HOST_SOURCES / "decode_gemv.c"
DEFAULT_PREFILL_SOURCE = HOST_SOURCES / "prefill_gemm.c"
DEFAULT_FLAGS: tuple[str, ...] = ("-O3", "-std=c11", "-fPIC", "-shared")  # no -march=native: portable results
HOST_FORMATS: tuple[str, ...] = PACKABLE  # every format with a packing into the kernel layout
HOST_PHASES: tuple[str, ...] = ("decode", "prefill")

MAX_WEIGHT_COPIES = 64
MAX_ROTATION_BYTES = 1 << 30
PARITY_SAMPLE_ABOVE = 1 << 26  # weights; above this the reference covers a row sample only
PARITY_SAMPLE_ROWS = 512
COMPILE_TIMEOUT_S = 120
PROBE_TIMEOUT_S = 10

# void sym(const int8_t *qs, const uint16_t *scales, const uint16_t *mins, const float *x, float *y,
#          int m, int n, int k)
_KERNEL_ARGTYPES: list[type[ctypes.c_void_p] | type[ctypes.c_int]] = [
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
]


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


def weight_copies(copy_bytes: int, llc: int, warm_cache: bool) -> int:
    """Copies whose total exceeds twice the LLC (so LRU-ish caches cannot hold them), capped."""
    if warm_cache or copy_bytes <= 0:
        return 1
    wanted = math.floor(2 * llc / copy_bytes) + 1
    by_memory = max(1, MAX_ROTATION_BYTES // copy_bytes)
    return max(1, min(wanted, MAX_WEIGHT_COPIES, by_memory))


def symbol_for(format_name: str, variant: Variant) -> str:
    """Exported C symbol of a host variant; the same names as the GPU kernels (kernels.families.abi)."""
    return kernel_symbol(variant)


def _variant_macro(variant: Variant) -> str:
    p = variant.params
    if variant.family == "decode":
        return f"TB_V({p['kb']},{p['tw']})"
    return f"TB_P({p['n_tile']},{p['m_tile']},{p['min_blocks']},{p['unroll']})"


class HostBackend:
    """Compiles and times host decode and prefill kernels; one instance per worker process."""

    name: str = "host"

    def __init__(
        self,
        artifact_dir: Path,
        source_path: Path | None = None,
        cc: str = "cc",
        flags: tuple[str, ...] = DEFAULT_FLAGS,
        prefill_source_path: Path | None = None,
    ) -> None:
        self.artifact_dir = Path(artifact_dir)
        self.source_path = Path(source_path) if source_path is not None else DEFAULT_SOURCE
        self.prefill_source_path = (
            Path(prefill_source_path) if prefill_source_path is not None else DEFAULT_PREFILL_SOURCE
        )
        self.cc = cc
        self.flags = tuple(flags)
        self.family = DecodeFamily()
        self.families: dict[str, KernelFamily] = {"decode": self.family, "prefill": PrefillFamily()}
        self._libs: dict[str, ctypes.CDLL] = {}  # keep loaded libraries alive per artifact path

    # -- identity -----------------------------------------------------------------

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
        """None when this backend has kernels for the point, else why not."""
        if arch != "host":
            return f"host backend runs arch 'host' only, not {arch!r}"
        if phase not in HOST_PHASES:
            return f"host backend has no {phase!r} kernels (phases: {', '.join(HOST_PHASES)})"
        if format_name not in HOST_FORMATS:
            return f"host backend has no {format_name} kernel (supported: {', '.join(HOST_FORMATS)})"
        return None

    # -- compilation ----------------------------------------------------------------

    def _source(self, phase: str) -> Path:
        return self.source_path if phase == "decode" else self.prefill_source_path

    def cache_key(self, source: str, format_name: str, variants: list[Variant], phase: str = "decode") -> str:
        """sha256 over everything that changes the binary (``source``: hash of source + headers)."""
        kind = format_kind(format_name)
        blob = json.dumps(
            {
                "source": source,
                "family": phase,
                "kind": kind.name,
                "defines": kind.defines,
                "variants": [v.name for v in variants],
                "compiler": self.cc,
                "toolchain": self.toolchain,
                "flags": list(self.flags),
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def build(
        self, format_name: str, variants: list[Variant] | None = None, phase: str = "decode"
    ) -> ArtifactInfo:
        """Compile (or reuse) the library holding ``variants`` (default: the family's whole host space).

        One library serves every format of one kind (sym / asym / sym16). Never raises for
        compiler failures: they come back as ``ok=False`` with the log.
        """
        family = self.families[phase]
        variants = family.space("host") if variants is None else variants
        source_path = self._source(phase)
        kind = format_kind(format_name)
        if not source_path.is_file():
            return ArtifactInfo(
                cache_key="",
                path=str(source_path),
                source_hash="",
                toolchain=self.toolchain,
                flags=self.flags,
                compiled=False,
                ok=False,
                log=f"cannot read source: {source_path} does not exist",
            )
        source_hash = closure_hash(source_path, (HOST_SOURCES,))
        key = self.cache_key(source_hash, format_name, variants, phase)
        out_dir = self.artifact_dir / key[:2]
        lib_path = out_dir / f"{phase}_{kind.name}_{key[:24]}.so"
        # one entry per exported symbol; host kernels have no ISA resource report
        resources: dict[str, dict[str, object]] = {symbol_for(format_name, v): {} for v in variants}
        info = ArtifactInfo(
            key, str(lib_path), source_hash, self.toolchain, self.flags, False, True, "", resources
        )
        if lib_path.is_file():
            return info
        info.compiled = True
        if not self.toolchain:
            info.ok, info.log = False, f"C compiler {self.cc!r} not found"
            return info
        out_dir.mkdir(parents=True, exist_ok=True)
        variant_list = " ".join(_variant_macro(v) for v in variants)
        fd, tmp_name = tempfile.mkstemp(suffix=".so.tmp", dir=out_dir)
        os.close(fd)
        argv = [
            self.cc,
            *self.flags,
            *(f"-D{k}={v}" for k, v in sorted(kind.defines.items())),
            f"-DTB_VARIANT_LIST={variant_list}",
            f"-I{HOST_SOURCES}",
            "-o",
            tmp_name,
            str(source_path),
            "-lm",
        ]
        try:
            proc = _run(argv, COMPILE_TIMEOUT_S)
            info.log = (" ".join(argv) + "\n" + proc.stdout + proc.stderr).strip()
            if proc.returncode != 0:
                info.ok = False
                return info
            os.replace(tmp_name, lib_path)  # atomic: concurrent workers never load a half-written file
        except (OSError, subprocess.TimeoutExpired) as exc:
            info.ok, info.log = False, f"{' '.join(argv)}\n{type(exc).__name__}: {exc}"
        finally:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)
        return info

    def _load(self, path: str) -> ctypes.CDLL:
        lib = self._libs.get(path)
        if lib is None:
            lib = ctypes.CDLL(path)
            lib.tb_time_dispatch.restype = ctypes.c_int64
            lib.tb_time_dispatch.argtypes = [ctypes.c_void_p, *_KERNEL_ARGTYPES]
            self._libs[path] = lib
        return lib

    # -- the task -----------------------------------------------------------------

    def run_task(self, spec: TaskSpec, progress: ProgressCallback | None = None) -> TaskResult:
        """Compile, check parity of, and time every variant of one task, interleaved.

        Raises ValueError only for a point this backend does not support (call
        ``supports`` first); compile, load and parse problems become per-variant errors.
        """
        reason = self.supports(spec.arch, spec.phase, spec.format)
        if reason is not None:
            raise ValueError(reason)
        device = self.detect() or DeviceInfo("host", "host", cpu_model(), os.cpu_count() or 1, "", "", "")
        family = self.families[spec.phase]
        artifact = self.build(spec.format, phase=spec.phase)

        results: dict[str, VariantResult] = {}
        parsed: list[tuple[str, Variant]] = []
        for name in spec.variants:
            try:
                parsed.append((name, family.parse(name, "host")))
            except InvalidVariant as exc:
                results[name] = VariantResult(name, [], None, error=str(exc))

        def finish(copies: int = 1) -> TaskResult:
            ordered = [results[name] for name in dict.fromkeys(spec.variants)]
            return TaskResult(device, artifact, ordered, weight_copies=copies)

        if not artifact.ok:
            for name, variant in parsed:
                symbol = symbol_for(spec.format, variant)
                error = f"compile failed: {artifact.log}"
                results[name] = VariantResult(name, [], None, error=error, symbol=symbol)
            return finish()

        rows = None
        if spec.n * spec.k > PARITY_SAMPLE_ABOVE:
            rows = sample_rows(spec.n, PARITY_SAMPLE_ROWS, spec.seed)
        problem = build_problem(spec.format, spec.n, spec.k, spec.m, seed=spec.seed, rows=rows)
        assert problem.packed is not None  # every HOST_FORMATS entry is packable
        copies = weight_copies(problem.packed.nbytes, llc_bytes(), spec.warm_cache)
        pools = _rotation_pools(problem.packed, copies)  # identical copies: parity holds whichever is read
        x = np.ascontiguousarray(problem.x)
        y = np.empty((spec.m, spec.n), dtype=np.float32)
        w_ptrs = [tuple(p[i].ctypes.data if p is not None else 0 for p in pools) for i in range(copies)]
        x_ptr, y_ptr = x.ctypes.data, y.ctypes.data

        lib = self._load(artifact.path)
        dispatchers: list[tuple[str, DispatchFn]] = []
        for name, variant in parsed:
            symbol = symbol_for(spec.format, variant)
            results[name] = VariantResult(name, [], None, symbol=symbol)
            try:
                kernel = getattr(lib, symbol)
            except AttributeError:
                results[name].error = f"symbol {symbol} missing from {artifact.path}"
                continue
            kernel.restype = None
            kernel.argtypes = _KERNEL_ARGTYPES
            results[name].parity = self._parity(kernel, problem, w_ptrs[0], x_ptr, y, y_ptr)
            fn_ptr = ctypes.cast(kernel, ctypes.c_void_p).value
            dispatchers.append((name, self._dispatcher(lib, fn_ptr, w_ptrs, x_ptr, y_ptr, spec)))

        passed = [name for name, r in results.items() if r.parity is not None and r.parity.passed]
        timing = interleave_task(spec, dispatchers, passed, buffers=copies, progress=progress)
        for name, rows_ in timing.dispatches.items():
            results[name].dispatches = rows_
        for name, error in timing.errors.items():
            results[name].error = error
        return finish(copies)

    @staticmethod
    def _parity(
        kernel: Callable[..., object],
        problem: Problem,
        w_ptr: tuple[int, ...],
        x_ptr: int,
        y: np.ndarray,
        y_ptr: int,
    ) -> Parity:
        """NaN-fill the output, run once, compare with the FP32 reference (int8-activation bounds)."""
        y.fill(np.nan)
        kernel(*w_ptr, x_ptr, y_ptr, problem.m, problem.n, problem.k)
        return problem.check(y, INT8_ACTIVATIONS)

    @staticmethod
    def _dispatcher(
        lib: ctypes.CDLL,
        fn_ptr: int | None,
        w_ptrs: list[tuple[int, ...]],
        x_ptr: int,
        y_ptr: int,
        spec: TaskSpec,
    ) -> DispatchFn:
        timer = lib.tb_time_dispatch
        m, n, k = spec.m, spec.n, spec.k

        def dispatch(buffer_index: int) -> int:
            return int(timer(fn_ptr, *w_ptrs[buffer_index], x_ptr, y_ptr, m, n, k))

        return dispatch


def _rotation_pools(packed: PackedWeights, copies: int) -> list[np.ndarray | None]:
    """``copies`` identical copies of each packed array (qs, scales, mins-or-None)."""
    pools: list[np.ndarray | None] = []
    for arr in (packed.qs, packed.scales, packed.mins):
        if arr is None:
            pools.append(None)
            continue
        pool = np.empty((copies, *arr.shape), dtype=arr.dtype)
        pool[:] = arr
        pools.append(pool)
    return pools
