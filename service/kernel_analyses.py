"""Stored ISA pre-screens (KernelAnalysis rows): write a pre-screen's results, read them back, find spills.

One row per (kernel, version, arch, format, variant); analysing again replaces the row, so the table always
holds the latest compiler's answer. ``spilling_variants`` is what a sweep with ``skip_spilling`` consults.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import KernelAnalysis, utcnow
from service.kernel_analysis_store import spilling_variants, stored_analyses  # noqa: F401  (re-exported)
from workers.prescreen import Prescreen, VariantAnalysis


def analysis_item(row: KernelAnalysis) -> dict[str, Any]:
    return {
        "arch": row.arch,
        "format": row.format,
        "variant": row.variant,
        "symbol": row.symbol,
        "ok": row.ok,
        "error": row.error,
        "resources": row.resources,
        "toolchain": row.toolchain,
        "created_at": row.created_at.isoformat() if row.created_at else None,
    }


def variant_item(item: VariantAnalysis, arch: str, toolchain: str) -> dict[str, Any]:
    return {
        "arch": arch,
        "format": item.format,
        "variant": item.variant,
        "symbol": item.symbol,
        "ok": item.ok,
        "error": item.error,
        "resources": item.resources,
        "toolchain": toolchain,
    }


def store_prescreen(session: Session, kernel: str, version: str, result: Prescreen) -> list[KernelAnalysis]:
    """Upsert one row per analysed (format, variant); returns the rows in the pre-screen's order."""
    existing = {
        (row.format, row.variant): row
        for row in session.scalars(
            select(KernelAnalysis).where(
                KernelAnalysis.kernel == kernel,
                KernelAnalysis.kernel_version == version,
                KernelAnalysis.arch == result.arch,
            )
        )
    }
    rows = []
    for item in result.items:
        row = existing.get((item.format, item.variant))
        if row is None:
            row = KernelAnalysis(
                kernel=kernel,
                kernel_version=version,
                arch=result.arch,
                format=item.format,
                variant=item.variant,
            )
            session.add(row)
        row.symbol = item.symbol[:200]
        row.ok = item.ok
        row.error = item.error
        row.resources = item.resources
        row.toolchain = result.toolchain
        row.created_at = utcnow()
        rows.append(row)
    session.flush()
    return rows
