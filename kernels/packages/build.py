"""What to compile for a (package, format, backend): translation units with their defines.

Two conventions, both KernelTuner-like: every parameter reaches the source as ``-DNAME=value`` (one unit per
variant, the same entry symbol in each), or the package names a template instantiation per variant
(``[variant] instantiate`` + ``list_define``) and all variants of one format and arch compile in ONE unit,
one symbol per variant, which keeps CI compile time flat as the space grows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernels.families.base import Variant
from kernels.formats.registry import get_format
from kernels.packages.layouts import format_defines, layout_for
from kernels.packages.package import KernelPackage


@dataclass(frozen=True)
class CompileUnit:
    """One translation unit: its main source, its defines and the variants (symbols) inside it."""

    source: Path
    defines: dict[str, str]
    variants: tuple[Variant, ...]

    def symbols(self, package: KernelPackage) -> dict[str, str]:
        """variant name -> entry symbol inside this unit."""
        return {v.name: package.symbol(v) for v in self.variants}

    def prelaunch_symbols(self, package: KernelPackage, backend: str) -> dict[str, str]:
        """variant name -> its prelaunch kernel's symbol in this unit (empty when there is none)."""
        return {
            v.name: package.prelaunch_symbol(v) for v in self.variants if package.has_prelaunch(v, backend)
        }


def format_build_defines(package: KernelPackage, format_name: str) -> dict[str, str]:
    fmt = get_format(format_name)
    if package.manifest.weights == "prepare":
        return format_defines(fmt)
    return layout_for(package.manifest.weights).defines(fmt)


def compile_units(
    package: KernelPackage, format_name: str, backend: str, variants: list[Variant]
) -> list[CompileUnit]:
    """The units that build ``variants``; empty when the package has no source for ``backend``."""
    sources = package.sources(backend)
    if not sources or not variants:
        return []
    source = sources[0]  # the translation unit; further files are headers it includes
    base = format_build_defines(package, format_name)
    list_define = package.manifest.variant.list_define
    if package.manifest.variant.instantiate is not None and list_define is not None:
        # no whitespace: nvcc re-splits -D values on spaces when it hands them to the host preprocessor
        instantiations = "".join("".join(str(package.instantiation(v)).split()) for v in variants)
        return [CompileUnit(source, {**base, list_define: instantiations}, tuple(variants))]
    if "<" in package.manifest.variant.symbol:  # template form: NVRTC / hiprtc lower each name expression
        return [CompileUnit(source, base, tuple(variants))]
    return [
        CompileUnit(source, {**base, **{p: str(value) for p, value in v.params.items()}}, (v,))
        for v in variants
    ]
