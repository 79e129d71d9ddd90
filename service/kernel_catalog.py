"""What `GET /v1/kernels[/{name}[/{version}]]` shows: built-in and uploaded packages with their versions.

Listing reads only the summary columns of the stored packages (never their files); the detail of one version
loads it through the same loader a sweep uses, so what is shown is what would run.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kernels.arches import BACKENDS
from kernels.packages.loader import builtin_packages
from kernels.packages.package import KernelPackage
from service.db.models import KernelPackageRow
from service.kernel_analyses import analysis_item, stored_analyses
from service.kernel_store import PackageNotFound, get_package, invalid_points

SUMMARY_COLUMNS = (
    KernelPackageRow.name,
    KernelPackageRow.version,
    KernelPackageRow.phase,
    KernelPackageRow.variants,
    KernelPackageRow.size_bytes,
    KernelPackageRow.uploaded_by,
    KernelPackageRow.created_at,
)


def _builtin_version(package: KernelPackage) -> dict[str, Any]:
    spaces = _spaces(package)
    return {
        "version": package.version,
        "ref": package.ref,
        "variants": max(spaces.values(), default=0),
        "size_bytes": sum(len(data) for data in package.files.values()),
        "uploaded_by": "",
        "created_at": None,
    }


def _row_version(row: Any) -> dict[str, Any]:
    return {
        "version": row.version,
        "ref": f"{row.name}@{row.version[:12]}",
        "variants": row.variants,
        "size_bytes": row.size_bytes,
        "uploaded_by": row.uploaded_by,
        "created_at": row.created_at.isoformat() if row.created_at else None,
    }


def _spaces(package: KernelPackage) -> dict[str, int]:
    return {b: len(package.space(b)) for b in BACKENDS if package.source_key(b) is not None}


def kernel_summaries(session: Session, name: str | None = None) -> list[dict[str, Any]]:
    """Every package (built-ins first), each with its versions newest first."""
    items: dict[str, dict[str, Any]] = {}
    for package in builtin_packages().values():
        if name is None or package.name == name:
            items[package.name] = {
                "name": package.name,
                "phase": package.phase,
                "builtin": True,
                "versions": [_builtin_version(package)],
            }
    query = select(*SUMMARY_COLUMNS).order_by(KernelPackageRow.name, KernelPackageRow.id.desc())
    if name is not None:
        query = query.where(KernelPackageRow.name == name)
    for row in session.execute(query):
        entry = items.setdefault(
            row.name, {"name": row.name, "phase": row.phase, "builtin": False, "versions": []}
        )
        entry["versions"].append(_row_version(row))
    for entry in items.values():
        entry["latest"] = entry["versions"][0]["version"] if entry["versions"] else None
    return list(items.values())


def kernel_versions(session: Session, name: str) -> dict[str, Any]:
    found = kernel_summaries(session, name)
    if not found:
        get_package(session, name)  # raises PackageNotFound naming what exists
        raise PackageNotFound(f"no kernel package {name}")  # pragma: no cover - get_package raised
    return found[0]


def kernel_detail(session: Session, name: str, version: str, arch: str | None = None) -> dict[str, Any]:
    """One version: manifest, files, what `describe()` says, spaces, invalid points and stored analyses."""
    package = get_package(session, name, version)
    row = None
    if not package.builtin:
        row = session.execute(
            select(*SUMMARY_COLUMNS).where(
                KernelPackageRow.name == name, KernelPackageRow.version == package.version
            )
        ).first()
    files = [
        {"path": path, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for path, data in sorted(package.files.items())
    ]
    return {
        "name": package.name,
        "version": package.version,
        "ref": package.ref,
        "phase": package.phase,
        "builtin": package.builtin,
        "uploaded_by": row.uploaded_by if row is not None else "",
        "created_at": row.created_at.isoformat() if row is not None and row.created_at else None,
        "manifest": package.manifest.model_dump(mode="json"),
        "files": files,
        "describe": package.describe(),
        "variants": _spaces(package),
        "invalid": invalid_points(package),
        "analyses": [analysis_item(a) for a in stored_analyses(session, package.name, package.version, arch)],
    }
