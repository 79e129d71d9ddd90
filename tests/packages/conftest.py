"""Kernel-package fixtures: a TestClient over each real database, the q8-rows test package as a tarball."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, select

from kernels.packages.archive import read_folder, write_archive
from service.api.app import create_app
from service.auth import create_token
from service.config import Settings, get_settings
from service.db.models import KernelAnalysis, KernelPackageRow
from service.db.session import session_scope

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "packages" / "q8-rows"


def package_files() -> dict[str, bytes]:
    return read_folder(PACKAGE_DIR)


def package_archive() -> bytes:
    return write_archive(package_files())


def tar_of(members: list[tarfile.TarInfo], contents: dict[str, bytes] | None = None) -> bytes:
    """A .tar.gz with exactly these members (links, odd names and all): what a hostile client can send."""
    contents = contents or {}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info in members:
            data = contents.get(info.name)
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def file_member(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = 0o644
    return info


def package_tar(extra: list[tarfile.TarInfo] | None = None, replace: dict[str, bytes] | None = None) -> bytes:
    """The q8-rows package plus extra members, or with some files' bytes replaced."""
    files = {**package_files(), **(replace or {})}
    members = [file_member(name) for name in sorted(files)] + list(extra or [])
    return tar_of(members, files)


def stored_counts(url: str) -> tuple[int, int]:
    """(kernel package rows, kernel analysis rows), read through a fresh connection."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            packages = connection.scalar(select(func.count()).select_from(KernelPackageRow)) or 0
            analyses = connection.scalar(select(func.count()).select_from(KernelAnalysis)) or 0
            return int(packages), int(analyses)
    finally:
        engine.dispose()


@dataclass
class Api:
    http: TestClient  # authenticated with a submit token
    url: str  # the database
    read_token: str


@pytest.fixture
def api(migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    settings = Settings(home=tmp_path, database_url=migrated_url, artifact_dir=tmp_path / "artifacts")
    # service.kernel_store materialises uploads under the process settings' artifact dir
    monkeypatch.setenv("TUNEBASE_ARTIFACT_DIR", str(settings.resolved_artifact_dir))
    get_settings.cache_clear()
    with session_scope(migrated_url) as session:
        submit = create_token(session, "kernel-ci", ["submit"])
        read = create_token(session, "kernel-reader", ["read"])
    app = create_app(settings, start_embedded_worker=False)
    with TestClient(app, headers={"Authorization": f"Bearer {submit}"}) as http:
        yield Api(http, migrated_url, read)
    get_settings.cache_clear()
