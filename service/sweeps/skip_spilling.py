"""`skip_spilling`: leave out variants whose stored ISA pre-screen shows register spills on the sweep's arch.

Spills are per (format, variant): the same variant may spill for a K-quant and not for Q8_0, so the filter
is per format. Without a stored pre-screen nothing is skipped and the sweep says so in its warnings.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from kernels.arches import get_arch
from kernels.packages.package import KernelPackage
from service.kernel_analysis_store import spilling_variants
from service.sweeps.spec import SpecProblem, SweepSpec


def variants_per_format(
    session: Session, spec: SweepSpec, package: KernelPackage, variants: list[str]
) -> tuple[dict[str, list[str]], list[str], list[SpecProblem]]:
    """(format -> variants to measure, warnings, problems); every format gets ``variants`` unless
    ``skip_spilling`` removes some. A format left with no variant is a problem (nothing would run)."""
    kept = {fmt: list(variants) for fmt in spec.formats}
    if not spec.skip_spilling:
        return kept, [], []
    if get_arch(spec.arch).isa is None:
        return kept, [f"skip_spilling: no ISA pre-screen exists for {spec.arch}; nothing skipped"], []
    spilling, analysed = spilling_variants(session, package.name, package.version, spec.arch, spec.formats)
    warnings: list[str] = []
    problems: list[SpecProblem] = []
    for index, fmt in enumerate(spec.formats):
        if fmt not in analysed:
            warnings.append(
                f"skip_spilling: no stored ISA pre-screen of {package.ref} for {spec.arch} {fmt}; nothing "
                f"skipped (run `tunebase kernel analyze {package.ref} --arch {spec.arch}`)"
            )
            continue
        skipped = [v for v in variants if v in spilling[fmt]]
        kept[fmt] = [v for v in variants if v not in spilling[fmt]]
        if skipped:
            warnings.append(
                f"skip_spilling: {len(skipped)} of {len(variants)} variants left out for {fmt} (they spill "
                f"on {spec.arch}): {', '.join(skipped)}"
            )
        if not kept[fmt]:
            problems.append(
                SpecProblem(("formats", index), f"every requested variant spills on {spec.arch} for {fmt}")
            )
    return kept, warnings, problems
