"""Reading a package's files from an untrusted ``.tar.gz`` or a folder, with limits.

A package arrives over HTTP from anyone holding a ``submit`` token, so nothing in it is trusted: the archive
is read member by member with size and count limits, only plain files (and folders) with plain relative
names are accepted (no ``..``, no absolute paths, no links, no devices), and the whole package is held in
memory as ``{relative path: bytes}`` so nothing touches the disk until it has been validated.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from pathlib import Path, PurePosixPath

from kernels.packages.manifest import MANIFEST_NAME

MAX_ARCHIVE_BYTES = 8 << 20  # compressed upload
MAX_TOTAL_BYTES = 16 << 20  # all files, uncompressed
MAX_FILE_BYTES = 4 << 20
MAX_FILES = 64
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/")


class PackageArchiveError(ValueError):
    """The archive or folder is not acceptable; ``status`` is the HTTP status that says why (413 or 422)."""

    def __init__(self, message: str, status: int = 422, member: str | None = None):
        super().__init__(message)
        self.status = status
        self.member = member


def check_member_name(name: str) -> str:
    """The normalised relative name, or PackageArchiveError naming the member."""
    if not name or name.startswith("/") or "\\" in name or PurePosixPath(name).is_absolute():
        raise PackageArchiveError(f"member {name!r}: absolute paths are not allowed", member=name)
    normal = posixpath.normpath(name)
    parts = PurePosixPath(normal).parts
    if normal.startswith("..") or ".." in parts or ".." in PurePosixPath(name).parts:
        raise PackageArchiveError(f"member {name!r}: '..' is not allowed", member=name)
    if not set(normal) <= NAME_CHARS or any(part.startswith(".") and part != "." for part in parts):
        raise PackageArchiveError(
            f"member {name!r}: names may use letters, digits, '.', '_', '-' only and not start with '.'",
            member=name,
        )
    return normal


def _strip_common_folder(files: dict[str, bytes]) -> dict[str, bytes]:
    """`tar czf pkg.tar.gz mypkg/` puts everything under ``mypkg/``; the manifest marks the root."""
    if MANIFEST_NAME in files:
        return files
    tops = {name.split("/", 1)[0] for name in files}
    if len(tops) == 1:
        top = next(iter(tops))
        if f"{top}/{MANIFEST_NAME}" in files:
            return {name.split("/", 1)[1]: data for name, data in files.items()}
    raise PackageArchiveError(f"no {MANIFEST_NAME} at the top of the package")


def read_archive(data: bytes) -> dict[str, bytes]:
    """``{relative path: bytes}`` of a ``.tar.gz`` (or plain ``.tar``) package, every limit enforced."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise PackageArchiveError(
            f"upload is {len(data)} bytes; the limit is {MAX_ARCHIVE_BYTES} bytes", status=413
        )
    files: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            for count, member in enumerate(archive, start=1):
                if count > MAX_FILES * 2:
                    raise PackageArchiveError(f"more than {MAX_FILES} files", status=413)
                name = check_member_name(member.name)
                if member.isdir():
                    continue
                if member.issym() or member.islnk():
                    raise PackageArchiveError(f"member {member.name!r}: links are not allowed", member=name)
                if not member.isfile():
                    raise PackageArchiveError(
                        f"member {member.name!r}: only regular files are allowed", member=name
                    )
                if member.size > MAX_FILE_BYTES:
                    raise PackageArchiveError(
                        f"member {member.name!r} is {member.size} bytes (limit {MAX_FILE_BYTES})", 413, name
                    )
                total += member.size
                if total > MAX_TOTAL_BYTES:
                    raise PackageArchiveError(f"package expands past {MAX_TOTAL_BYTES} bytes", status=413)
                if name in files:
                    raise PackageArchiveError(f"member {member.name!r} appears twice", member=name)
                extracted = archive.extractfile(member)
                if extracted is None:  # pragma: no cover - isfile() members always extract
                    raise PackageArchiveError(f"member {member.name!r} cannot be read", member=name)
                files[name] = extracted.read(MAX_FILE_BYTES + 1)
                if len(files) > MAX_FILES:
                    raise PackageArchiveError(f"more than {MAX_FILES} files", status=413)
    except (tarfile.TarError, EOFError, OSError, ValueError) as error:
        if isinstance(error, PackageArchiveError):
            raise
        raise PackageArchiveError(f"not a readable .tar.gz: {error}") from None
    return _strip_common_folder(files)


def read_folder(root: Path) -> dict[str, bytes]:
    """The same limits for a folder on disk (built-in packages, `tunebase kernel push DIR`)."""
    root = Path(root)
    if not (root / MANIFEST_NAME).is_file():
        raise PackageArchiveError(f"{root}: no {MANIFEST_NAME}")
    files: dict[str, bytes] = {}
    total = 0
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if any(part.startswith(".") or part == "__pycache__" for part in PurePosixPath(relative).parts):
            continue
        if path.is_symlink():
            raise PackageArchiveError(f"{relative}: links are not allowed", member=relative)
        if path.is_dir():
            continue
        if not path.is_file():
            raise PackageArchiveError(f"{relative}: only regular files are allowed", member=relative)
        check_member_name(relative)
        data = path.read_bytes()
        if len(data) > MAX_FILE_BYTES:
            raise PackageArchiveError(f"{relative} is {len(data)} bytes (limit {MAX_FILE_BYTES})", 413)
        total += len(data)
        files[relative] = data
        if len(files) > MAX_FILES or total > MAX_TOTAL_BYTES:
            raise PackageArchiveError(f"more than {MAX_FILES} files or {MAX_TOTAL_BYTES} bytes", 413)
    return files


def write_archive(files: dict[str, bytes]) -> bytes:
    """A deterministic ``.tar.gz`` of a file map (what `tunebase kernel push` uploads)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(files[name]))
    return buffer.getvalue()
