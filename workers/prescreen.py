"""ISA pre-screen without a GPU: compile a package's variants for one AMD arch and read their resources.

Each valid variant is compiled (in a private temporary folder, by the arch's compiler, with its timeout)
and its code object read by the same ISA code as ``tunebase isa``: VGPR/AGPR/SGPR, LDS, scratch, spills,
waves per SIMD and the limiter. A unit holding several variants (the template-instantiation convention)
that fails is rebuilt one variant at a time, so a variant that does not compile is reported with its own
compiler message and the others are still analysed. Storage is the caller's job (service/kernel_analyses).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernels.arches import ARCHES, get_arch
from kernels.families.base import Variant
from kernels.packages.build import CompileUnit, compile_units
from kernels.packages.expressions import ExpressionError, Value, parse
from kernels.packages.layouts import check_format
from kernels.packages.loader import INCLUDE_DIR, materialize
from kernels.packages.manifest import DEVICE_NAMES
from kernels.packages.package import KernelPackage
from workers.compilers import compiler_for_arch
from workers.compilers.base import Compiler
from workers.isa.analyze import disassembly_note, kernel_report
from workers.isa.bundle import NotACodeObject, code_objects
from workers.isa.isolate import disassemble_isolated
from workers.isa.metadata import read_metadata

PRESCREEN_BUDGET_S = 1800.0  # per request; each compile also has the compiler layer's own timeout
MAX_ERROR_CHARS = 4000  # a compiler log is kept to its head; the first error is what the author needs
RESOURCE_KEYS = (
    "vgpr",
    "arch_vgpr",
    "agpr",
    "sgpr",
    "lds_bytes",
    "scratch_bytes",
    "vgpr_spills",
    "sgpr_spills",
    "wavefront_size",
    "workgroup_size",
    "waves_per_simd",
    "limiter",
    "occupancy",
    "census",
    "diagnosis",
    "target",
    "disassembler",
    "disassembly_error",
    "liveness",
    "hot_loop",
)


class PrescreenError(ValueError):
    """The request cannot be pre-screened at all (arch, format or variant names); says which field."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


class CompilerUnavailable(RuntimeError):
    """The arch's compiler is not installed on this machine (a server problem, not the caller's)."""


@dataclass(frozen=True)
class VariantAnalysis:
    """One (format, variant): its resources, or the reason it has none."""

    format: str
    variant: str
    symbol: str
    ok: bool
    error: str | None = None
    resources: dict[str, Any] = field(default_factory=dict)

    @property
    def spills(self) -> bool:
        return bool(self.resources.get("vgpr_spills") or self.resources.get("sgpr_spills"))


@dataclass(frozen=True)
class Prescreen:
    arch: str
    toolchain: str
    items: list[VariantAnalysis]
    not_reached: list[tuple[str, str]] = field(default_factory=list)  # (format, variant) past the time budget


def prescreen_arches() -> tuple[str, ...]:
    """AMD arches of the arch table whose code objects can be built here (a compiler driver) and read."""
    found = []
    for arch in ARCHES.values():
        if arch.backend != "rocm" or arch.isa is None:
            continue
        try:
            compiler_for_arch(arch.name)
        except KeyError:
            continue
        found.append(arch.name)
    return tuple(found)


def toolchain_label(compiler: Compiler) -> str:
    """``hipcc: HIP version: 5.2...; Debian clang version 15.0.6``: the version lines of the identity."""
    lines = [line.strip() for line in compiler.identity().splitlines()[1:] if "version" in line.lower()]
    return f"{compiler.name}: {'; '.join(lines) or 'unknown version'}"[:300]


def _clip(log: str) -> str:
    return log if len(log) <= MAX_ERROR_CHARS else log[:MAX_ERROR_CHARS] + "\n[... log truncated]"


def device_bindings(variant: Variant, arch: str) -> dict[str, Value]:
    """A variant's parameters plus what the arch table knows of the device (no problem size)."""
    facts = get_arch(arch)
    return {**variant.params, "backend": facts.backend, "arch": arch, "cus": facts.cus, "wave": facts.wave}


def device_rule_failures(package: KernelPackage, variant: Variant, arch: str) -> list[str]:
    """Restrictions over parameters and device facts only (e.g. ``arch != 'gfx906' or X``) this arch breaks.

    Rules that also read n, k or m are decided per task; the pre-screen cannot know the problem.
    """
    bindings = device_bindings(variant, arch)
    allowed = set(variant.params) | DEVICE_NAMES
    failed = []
    for rule in package.manifest.restrictions.rules:
        expression = parse(rule)
        if not expression.names <= allowed or expression.names <= set(variant.params) | {"backend"}:
            continue  # problem-dependent, or a space rule already applied by package.space()
        try:
            if not expression.evaluate(bindings):
                failed.append(rule)
        except ExpressionError as error:
            failed.append(f"{rule} ({error})")
    return failed


def launch_threads(package: KernelPackage, variant: Variant, arch: str) -> int | None:
    """Threads per workgroup when the launch block reads only parameters and device facts, else None
    (the code object's max flat workgroup size stands in)."""
    bindings = device_bindings(variant, arch)
    threads = 1
    for source in package.manifest.launch.block:
        expression = parse(source)
        if not expression.names <= set(bindings):
            return None
        try:
            threads *= expression.evaluate_int(bindings)
        except ExpressionError:
            return None
    return threads if threads > 0 else None


def select_variants(package: KernelPackage, arch: str, names: Iterable[str] | None) -> list[Variant]:
    backend = get_arch(arch).backend
    space = package.space(backend)
    if names is None:
        return [v for v in space if not device_rule_failures(package, v, arch)]
    by_name = {v.name: v for v in space}
    chosen = []
    for index, name in enumerate(names):
        if name not in by_name:
            raise PrescreenError(
                f"variants.{index}", f"{name!r} is not a valid {package.name} variant for {arch}"
            )
        failed = device_rule_failures(package, by_name[name], arch)
        if failed:
            raise PrescreenError(
                f"variants.{index}", f"{name} breaks restriction(s) on {arch}: {'; '.join(failed)}"
            )
        chosen.append(by_name[name])
    return chosen


def select_formats(package: KernelPackage, formats: Iterable[str] | None) -> list[str]:
    if formats is None:
        return [f for f in package.manifest.formats if check_format(package.manifest.weights, f) is None]
    chosen = []
    for index, name in enumerate(formats):
        if name not in package.manifest.formats:
            known = ", ".join(package.manifest.formats)
            raise PrescreenError(f"formats.{index}", f"package {package.name} does not read {name} ({known})")
        chosen.append(name)
    return chosen


def _read_code_object(data: bytes, arch: str) -> dict[str, dict[str, Any]]:
    """Per kernel name: the §7 report fields (with disassembly-based census where an engine exists)."""
    reports: dict[str, dict[str, Any]] = {}
    for obj in code_objects(data):
        meta = read_metadata(obj.data)
        disassembly = disassemble_isolated(obj.data, meta.arch)
        for kernel in meta.kernels:
            note, error = disassembly_note(disassembly, kernel.name)
            reports[kernel.name] = {
                "meta": kernel,
                "functions": disassembly.functions,
                "arch": meta.arch,
                "target": meta.target or obj.target,
                "disassembler": note,
                "disassembly_error": error,
                "warnings": meta.warnings,
            }
    return reports


def _analyse_unit(
    package: KernelPackage, unit: CompileUnit, fmt: str, arch: str, compiler: Compiler, work: Path, root: Path
) -> list[VariantAnalysis]:
    """Compile one unit and read every variant's symbol from it; a failed compile fails its variants."""
    source = root / unit.source.relative_to(package.root)
    out = work / f"unit-{len(list(work.glob('unit-*')))}.co"
    result = compiler.compile(source, arch, unit.defines, out)
    symbols = unit.symbols(package)
    if not result.ok or result.path is None:
        log = _clip(
            result.log.replace(str(root) + "/", "")
            .replace(str(work) + "/", "")
            .replace(str(INCLUDE_DIR), "<include>")
        )
        return [VariantAnalysis(fmt, v.name, symbols[v.name], False, log) for v in unit.variants]
    try:
        kernels = _read_code_object(result.path.read_bytes(), arch)
    except (NotACodeObject, OSError, ValueError) as error:
        message = f"the compiler's output is not a readable code object: {error}"
        return [VariantAnalysis(fmt, v.name, symbols[v.name], False, message) for v in unit.variants]
    found = []
    for variant in unit.variants:
        symbol = symbols[variant.name]
        entry = kernels.get(symbol)
        if entry is None:
            names = ", ".join(sorted(kernels)) or "none"
            message = f"entry symbol {symbol!r} is not a kernel of the code object (kernels: {names})"
            found.append(VariantAnalysis(fmt, variant.name, symbol, False, message))
            continue
        report = kernel_report(
            entry["arch"], entry["meta"], entry["functions"], launch_threads(package, variant, arch)
        )
        report.update(
            target=entry["target"],
            disassembler=entry["disassembler"],
            disassembly_error=entry["disassembly_error"],
        )
        if entry["warnings"]:
            report["diagnosis"] = [*entry["warnings"], *report["diagnosis"]]
        resources = {key: report.get(key) for key in RESOURCE_KEYS}
        found.append(VariantAnalysis(fmt, variant.name, symbol, True, None, resources))
    return found


def analyse_package(
    package: KernelPackage,
    arch: str,
    formats: Iterable[str] | None = None,
    variants: Iterable[str] | None = None,
    compiler: Compiler | None = None,
    budget_s: float = PRESCREEN_BUDGET_S,
) -> Prescreen:
    """Compile and read every (format, variant) asked for; PrescreenError for a bad arch/format/variant.

    An untrusted package could ask for thousands of slow compiles: after ``budget_s`` no new unit starts and
    the variants not reached are listed (never stored as failures: nothing is known about them).
    """
    if arch not in prescreen_arches():
        known = ", ".join(prescreen_arches())
        raise PrescreenError(
            "arch", f"the ISA pre-screen reads AMDGPU code objects; {arch!r} is not one of {known}"
        )
    backend = get_arch(arch).backend
    if package.source_key(backend) is None:
        raise PrescreenError("arch", f"package {package.name} has no source for the {backend} backend")
    chosen_formats = select_formats(package, formats)
    chosen = select_variants(package, arch, variants)
    compiler = compiler or compiler_for_arch(arch)
    available = getattr(compiler, "available", None)
    if available is not None and not available():
        raise CompilerUnavailable(f"the {compiler.name} compiler for {arch} is not installed on this machine")
    items: list[VariantAnalysis] = []
    not_reached: list[tuple[str, str]] = []
    deadline = time.monotonic() + budget_s
    with tempfile.TemporaryDirectory(prefix="tunebase-prescreen-") as tmp:
        work = Path(tmp)
        root = materialize(package.files, package.version, work)  # private copy: nothing shared is written
        for fmt in chosen_formats:
            for unit in compile_units(package, fmt, backend, chosen):
                if time.monotonic() > deadline:
                    not_reached.extend((fmt, v.name) for v in unit.variants)
                    continue
                results = _analyse_unit(package, unit, fmt, arch, compiler, work, root)
                if len(unit.variants) > 1 and not any(r.ok for r in results):
                    results = []  # one broken variant fails a shared unit: rebuild each alone to find it
                    for variant in unit.variants:
                        for single in compile_units(package, fmt, backend, [variant]):
                            results.extend(_analyse_unit(package, single, fmt, arch, compiler, work, root))
                items.extend(results)
    return Prescreen(arch, toolchain_label(compiler), items, not_reached)
