"""Reading stored ISA pre-screens (KernelAnalysis rows): the part sweeps consult, with no worker imports.

``spilling_variants`` is what a sweep with ``skip_spilling`` asks; service.kernel_analyses writes them.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import KernelAnalysis


def stored_analyses(
    session: Session, kernel: str, version: str, arch: str | None = None
) -> list[KernelAnalysis]:
    query = select(KernelAnalysis).where(
        KernelAnalysis.kernel == kernel, KernelAnalysis.kernel_version == version
    )
    if arch is not None:
        query = query.where(KernelAnalysis.arch == arch)
    order = (KernelAnalysis.arch, KernelAnalysis.format, KernelAnalysis.id)
    return list(session.scalars(query.order_by(*order)))


def spilling_variants(
    session: Session, kernel: str, version: str, arch: str, formats: list[str]
) -> tuple[dict[str, set[str]], set[str]]:
    """(format -> variants whose stored analysis shows VGPR or SGPR spills, formats with any analysis)."""
    spilling: dict[str, set[str]] = {fmt: set() for fmt in formats}
    analysed: set[str] = set()
    for row in stored_analyses(session, kernel, version, arch):
        if row.format not in spilling:
            continue
        analysed.add(row.format)
        resources = row.resources or {}
        if row.ok and ((resources.get("vgpr_spills") or 0) > 0 or (resources.get("sgpr_spills") or 0) > 0):
            spilling[row.format].add(row.variant)
    return spilling, analysed
