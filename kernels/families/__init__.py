"""Kernel families are kernel packages (DESIGN §9): the built-in ones live in kernels/library.

``family_for_phase`` is the phase's built-in package; any package implements the family protocol
(``name``, ``phase``, ``space``, ``parse``) declared in kernels.families.base.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernels.families.base import InvalidVariant, KernelFamily, Variant

if TYPE_CHECKING:
    from kernels.packages.package import KernelPackage


def family_for_phase(phase: str) -> KernelPackage:
    """The phase's built-in package; KeyError names the phases that have one."""
    from kernels.packages.loader import BUILTIN_FOR_PHASE, builtin_for_phase

    try:
        return builtin_for_phase(phase)
    except KeyError:
        known = ", ".join(BUILTIN_FOR_PHASE)
        raise KeyError(f"no kernel family for phase {phase!r}; known phases: {known}") from None


__all__ = ["InvalidVariant", "KernelFamily", "Variant", "family_for_phase"]
