"""NVRTC compilation of the HIP-dialect kernel sources into sm_90 cubins, content-addressed.

The cache key covers everything that changes the binary (source, every header it
may include, defines, options, NVRTC version); the cubin is written atomically so
concurrent workers never load half a file (same scheme as the host backend).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kernels.packages.loader import INCLUDE_DIR
from workers.compilers.lock import DEFAULT_WAIT_S, sweep_stale_temps, temp_prefix, unit_lock
from workers.harness import cuda_driver as cd

SASS_TIMEOUT_S = 60
NVRTC_ERROR_COMPILATION = 6  # nvrtcResult: the source did not compile (anything else is not its fault)


@dataclass
class CompileResult:
    cache_key: str
    path: str
    source_hash: str
    toolchain: str
    options: tuple[str, ...]
    compiled: bool
    ok: bool
    log: str = ""
    symbols: dict[str, str] = field(default_factory=dict)  # requested name -> lowered (mangled) name
    seconds: float = 0.0  # NVRTC time of this call (0 when reused)
    waited_s: float | None = None  # time spent waiting for another compiler of this key (None: gave up)
    rejected: bool = False  # NVRTC refused the source (a compile error, recorded and not retried)


def nvrtc_version() -> str:
    if cd.nvrtc is None:
        return ""
    major, minor = cd.check(cd.nvrtc.nvrtcVersion(), "nvrtcVersion")
    return f"nvrtc {major}.{minor}"


LIBRARY_INCLUDE = INCLUDE_DIR  # kernels/library/include: headers every package may include


def read_headers(*include_dirs: Path) -> dict[str, str]:
    """Every header beside the source, then the library's (tb_portability.h): all enter the cache key
    and NVRTC's virtual includes; the first directory wins on a name clash."""
    headers: dict[str, str] = {}
    for include_dir in include_dirs:
        if include_dir.is_dir():
            for path in sorted(include_dir.iterdir()):
                if path.suffix in {".h", ".hpp", ".cuh"} and path.is_file():
                    headers.setdefault(path.name, path.read_text())
    return headers


def cache_key(
    source: str, headers: dict[str, str], options: list[str], names: list[str], toolchain: str
) -> str:
    blob = json.dumps(
        {"source": source, "headers": headers, "options": options, "names": names, "toolchain": toolchain},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def compile_cubin(
    source_path: Path,
    artifact_dir: Path,
    stem: str,
    options: list[str],
    name_expressions: list[str],
    lock_wait_s: float = DEFAULT_WAIT_S,
) -> CompileResult:
    """Compile (or reuse) one cubin; ``name_expressions`` are template instantiations to keep and lower.

    One compiler per cache key on a host: the first caller takes a file lock beside the cubin and
    compiles; concurrent callers wait for it and reuse its cubin (``compiled=False``, ``waited_s``).
    A unit NVRTC rejects is remembered beside it too (``.error.json``): every later caller gets the
    same log without recompiling. Never raises for compiler errors: they come back as ``ok=False``.
    """
    toolchain = nvrtc_version()
    try:
        source = source_path.read_text()
    except OSError as exc:
        return CompileResult("", str(source_path), "", toolchain, tuple(options), False, False, str(exc))
    headers = read_headers(source_path.parent, LIBRARY_INCLUDE)
    source_hash = hashlib.sha256(source.encode()).hexdigest()
    key = cache_key(source, headers, options, name_expressions, toolchain)
    out_dir = artifact_dir / key[:2]
    cubin = out_dir / f"{stem}_{key[:24]}.cubin"
    result = CompileResult(key, str(cubin), source_hash, toolchain, tuple(options), False, True)
    if _reuse(cubin, result):
        return result
    if cd.nvrtc is None:
        result.compiled, result.ok, result.log = True, False, cd.IMPORT_ERROR or "NVRTC unavailable"
        return result
    with unit_lock(cubin.with_suffix(".lock"), lock_wait_s) as waited:
        result.waited_s = round(waited, 3) if waited is not None else None
        if _reuse(cubin, result):  # the holder we waited for compiled it
            return result
        if waited is not None:  # the lock is ours: a killed compiler's temporaries are litter
            sweep_stale_temps(cubin, cubin.with_suffix(".names.json"), cubin.with_suffix(".error.json"))
        started = time.monotonic()
        data = _nvrtc(source, source_path.name, headers, options, name_expressions, result)
        result.compiled, result.seconds = True, round(time.monotonic() - started, 3)
        out_dir.mkdir(parents=True, exist_ok=True)
        if data is None:
            if result.rejected:  # NVRTC's verdict on these exact inputs: the same every time
                record = json.dumps({"log": result.log}).encode()
                _atomic_write(cubin.with_suffix(".error.json"), record, out_dir)
            return result
        _atomic_write(cubin.with_suffix(".names.json"), json.dumps(result.symbols).encode(), out_dir)
        _atomic_write(cubin, data, out_dir)  # last: a cubin on disk means its names are there too
    return result


def _reuse(cubin: Path, result: CompileResult) -> bool:
    """Fill ``result`` from a finished compile of this key (a cubin, or NVRTC's recorded rejection)."""
    names_file, error_file = cubin.with_suffix(".names.json"), cubin.with_suffix(".error.json")
    if cubin.is_file() and names_file.is_file():
        result.symbols = json.loads(names_file.read_text())
        return True
    if error_file.is_file():
        result.ok, result.rejected = False, True
        result.log = "(cached NVRTC rejection) " + str(json.loads(error_file.read_text()).get("log", ""))
        return True
    return False


def _nvrtc(
    source: str,
    source_name: str,
    headers: dict[str, str],
    options: list[str],
    name_expressions: list[str],
    result: CompileResult,
) -> bytes | None:
    """NVRTC one program; the cubin, or None with ``result.ok`` False and the log filled."""
    nv = cd.nvrtc
    assert nv is not None
    header_names = [n.encode() for n in headers]
    header_srcs = [headers[n].encode() for n in headers]
    prog = cd.check(
        nv.nvrtcCreateProgram(source.encode(), source_name.encode(), len(headers), header_srcs, header_names),
        "nvrtcCreateProgram",
    )
    try:
        templated = [e for e in name_expressions if not e.isidentifier()]  # extern "C" names need no lowering
        for expr in templated:
            cd.check(nv.nvrtcAddNameExpression(prog, expr.encode()), "nvrtcAddNameExpression")
        opts = [o.encode() for o in options]
        err = nv.nvrtcCompileProgram(prog, len(opts), opts)[0]
        log_size = cd.check(nv.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        log = b" " * log_size
        cd.check(nv.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        result.log = (" ".join(options) + "\n" + log.decode(errors="replace").rstrip("\0 ")).strip()
        if int(err) != 0:
            result.ok = False
            result.rejected = int(err) == NVRTC_ERROR_COMPILATION
            return None
        size = cd.check(nv.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        data = b" " * size
        cd.check(nv.nvrtcGetCUBIN(prog, data), "nvrtcGetCUBIN")
        for expr in name_expressions:
            if expr.isidentifier():
                result.symbols[expr] = expr
                continue
            lowered = cd.check(nv.nvrtcGetLoweredName(prog, expr.encode()), "nvrtcGetLoweredName")
            result.symbols[expr] = lowered.decode() if isinstance(lowered, bytes) else str(lowered)
    finally:
        nv.nvrtcDestroyProgram(prog)
    return data


def _atomic_write(path: Path, data: bytes, out_dir: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def sass_census(cubin: Path) -> dict[str, dict[str, int]]:
    """Per function, opcode counts from ``cuobjdump -sass`` (empty when the tool is absent)."""
    tool = shutil.which("cuobjdump")
    if tool is None:
        return {}
    try:
        proc = subprocess.run(
            [tool, "-sass", str(cubin)], capture_output=True, text=True, timeout=SASS_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if proc.returncode != 0:
        return {}
    return parse_sass(proc.stdout)


def parse_sass(text: str) -> dict[str, dict[str, int]]:
    """Count opcodes (with their modifiers, e.g. ``LDG.E.128.CONSTANT``) per ``Function :`` section."""
    census: dict[str, Counter[str]] = {}
    current: Counter[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Function :"):
            current = census.setdefault(stripped.split(":", 1)[1].strip(), Counter())
            continue
        if current is None or not stripped.startswith("/*") or "*/" not in stripped:
            continue
        body = stripped.split("*/", 1)[1].strip()
        if not body or body.startswith("/*"):
            continue
        body = body.rstrip(";").strip()
        if body.startswith("@"):  # predicate guard
            body = body.split(None, 1)[1] if " " in body else ""
        opcode = body.split(None, 1)[0] if body else ""
        if opcode and opcode[0].isalpha():
            current[opcode.rstrip(";")] += 1
    return {name: dict(counter) for name, counter in census.items()}


def summarize_census(opcodes: dict[str, int]) -> dict[str, int]:
    """The figures an engineer asks first: total, wide global loads, dp4a, local (spill) traffic."""

    def count(pred: object) -> int:
        return sum(n for op, n in opcodes.items() if callable(pred) and pred(op))

    return {
        "instructions": sum(opcodes.values()),
        "global_loads": count(lambda op: op.startswith("LDG")),
        "global_loads_128": count(lambda op: op.startswith("LDG") and ".128" in op),
        "global_stores": count(lambda op: op.startswith("STG")),
        "local_loads": count(lambda op: op.startswith("LDL")),
        "local_stores": count(lambda op: op.startswith("STL")),
        "shared_loads": count(lambda op: op.startswith("LDS")),
        "dp4a": count(lambda op: op.startswith("IDP")),
        "ffma": count(lambda op: op.startswith("FFMA")),
        "hfma2": count(lambda op: op.startswith("HFMA2")),
        "shuffles": count(lambda op: op.startswith("SHFL")),
        "atomics": count(lambda op: op.startswith(("RED", "ATOM"))),
        "barriers": count(lambda op: op.startswith("BAR")),
    }
