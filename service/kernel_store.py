"""Kernel packages in the database: store an upload, resolve ``name`` / ``name@sha-prefix`` to a package.

Built-in packages (kernels/library) are resolved from disk and uploaded ones from their stored files, through
the same loader (kernels.packages.loader.load_files), so a sweep cannot tell them apart. An upload cannot
shadow a built-in name: the built-ins are what a sweep without ``kernel`` runs.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kernels.packages.loader import builtin_for_phase, builtin_packages, load_files, materialize
from kernels.packages.package import KernelPackage
from service.config import get_settings
from service.db.models import KernelPackageRow


class PackageNotFound(LookupError):
    """No package answers a reference; the message says what exists."""


@dataclass(frozen=True)
class StoredPackage:
    package: KernelPackage
    created: bool
    invalid: list[dict[str, Any]]


def _encode(files: dict[str, bytes]) -> dict[str, str]:
    return {name: base64.b64encode(data).decode("ascii") for name, data in files.items()}


def _decode(files: dict[str, Any]) -> dict[str, bytes]:
    return {name: base64.b64decode(data) for name, data in files.items()}


def _from_row(row: KernelPackageRow, cache_dir: Path | None = None) -> KernelPackage:
    files = _decode(row.files)
    root = materialize(files, row.version, Path(cache_dir or get_settings().resolved_artifact_dir))
    return load_files(files, root)


def invalid_points(package: KernelPackage) -> list[dict[str, Any]]:
    """Points no backend can run, each with the first restriction that removes it."""
    by_backend = {
        b: {p["point"]: p["rule"] for p in package.invalid_points(b)} for b in package.describe()["backends"]
    }
    if not by_backend:
        return []
    common = set.intersection(*(set(points) for points in by_backend.values()))
    first = next(iter(by_backend.values()))
    return [{"point": point, "rule": first[point]} for point in first if point in common]


def store_package(session: Session, files: dict[str, bytes], uploaded_by: str) -> StoredPackage:
    """Validate and store (idempotent: the same bytes give the same version, stored once)."""
    package = load_files(files, root=Path("."))  # ManifestError for a bad manifest; nothing stored
    if package.name in builtin_packages():
        from kernels.packages.manifest import ManifestError

        raise ManifestError([("name", f"{package.name!r} is a built-in package; choose another name")])
    existing = session.scalar(
        select(KernelPackageRow).where(
            KernelPackageRow.name == package.name, KernelPackageRow.version == package.version
        )
    )
    invalid = invalid_points(package)
    if existing is not None:
        return StoredPackage(_from_row(existing), False, invalid)
    backends = package.describe()["backends"]
    variants = max((len(package.space(b)) for b in backends), default=0)
    row = KernelPackageRow(
        name=package.name,
        version=package.version,
        phase=package.phase,
        manifest=package.manifest.model_dump(mode="json"),
        files=_encode(files),
        size_bytes=sum(len(data) for data in files.values()),
        variants=variants,
        invalid=invalid,
        uploaded_by=uploaded_by,
    )
    session.add(row)
    try:
        session.flush()
    except IntegrityError:  # a concurrent upload of the same bytes won; same content, same answer
        session.rollback()
        return StoredPackage(get_package(session, package.name, package.version), False, invalid)
    return StoredPackage(_from_row(row), True, invalid)


def get_package(session: Session, name: str, version: str | None = None) -> KernelPackage:
    """A package by name (newest upload) or by version prefix; built-ins by name or their own version."""
    builtin = builtin_packages().get(name)
    if builtin is not None:
        if version is None or builtin.version.startswith(version):
            return builtin
        raise PackageNotFound(f"built-in package {name} has version {builtin.version[:12]}, not {version}")
    query = select(KernelPackageRow).where(KernelPackageRow.name == name)
    if version is not None:
        query = query.where(KernelPackageRow.version.startswith(version, autoescape=True))
    rows = session.scalars(query.order_by(KernelPackageRow.id.desc())).all()
    if version is not None and len({row.version for row in rows}) > 1:
        raise PackageNotFound(f"{name}@{version} is ambiguous: write more of the sha256")
    if not rows:
        known = ", ".join([*builtin_packages(), *list_uploaded_names(session)])
        what = f"{name}@{version}" if version else name
        raise PackageNotFound(f"no kernel package {what}; known: {known}")
    return _from_row(rows[0])


def resolve(session: Session, ref: str | None, phase: str) -> KernelPackage:
    """A sweep's ``kernel`` (``name`` or ``name@sha-prefix``), or the phase's built-in package."""
    if not ref:
        return builtin_for_phase(phase)
    name, _, version = ref.partition("@")
    package = get_package(session, name, version or None)
    if package.phase != phase:
        raise PackageNotFound(f"package {package.name} is a {package.phase} kernel, not {phase}")
    return package


def list_uploaded_names(session: Session) -> list[str]:
    return list(dict.fromkeys(session.scalars(select(KernelPackageRow.name).order_by(KernelPackageRow.name))))


def versions(session: Session, name: str) -> list[KernelPackageRow]:
    return list(
        session.scalars(
            select(KernelPackageRow).where(KernelPackageRow.name == name).order_by(KernelPackageRow.id.desc())
        )
    )
