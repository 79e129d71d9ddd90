"""Kernel families by name and by phase."""

from __future__ import annotations

from kernels.families.base import InvalidVariant, KernelFamily, Variant
from kernels.families.decode import DecodeFamily
from kernels.families.prefill import PrefillFamily

FAMILIES: dict[str, KernelFamily] = {"decode": DecodeFamily(), "prefill": PrefillFamily()}


def family_for_phase(phase: str) -> KernelFamily:
    """The family that serves a phase; KeyError names the phases that have one."""
    for family in FAMILIES.values():
        if family.phase == phase:
            return family
    known = ", ".join(sorted({f.phase for f in FAMILIES.values()}))
    raise KeyError(f"no kernel family for phase {phase!r}; known phases: {known}")


__all__ = [
    "FAMILIES",
    "DecodeFamily",
    "InvalidVariant",
    "KernelFamily",
    "PrefillFamily",
    "Variant",
    "family_for_phase",
]
