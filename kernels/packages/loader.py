"""One loader for every package: the built-in library under ``kernels/library`` and uploaded ones alike.

Uploaded packages live in the database as file maps; ``materialize`` writes one into a content-addressed
folder (atomically, so concurrent workers never compile a half-written tree) before it is compiled.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from functools import cache, lru_cache
from pathlib import Path

from kernels.packages.archive import PackageArchiveError, read_folder
from kernels.packages.layouts import check_format
from kernels.packages.manifest import MANIFEST_NAME, ManifestError, load_manifest
from kernels.packages.package import KernelPackage

LIBRARY = Path(__file__).resolve().parents[1] / "library"
INCLUDE_DIR = LIBRARY / "include"  # headers every package may include (tb_portability.h, tb_host.h)
BUILTIN_FOR_PHASE: dict[str, str] = {"decode": "tb-decode", "prefill": "tb-prefill"}


def load_files(files: dict[str, bytes], root: Path, builtin: bool = False) -> KernelPackage:
    """Validate a file map as a package; ManifestError lists every problem by manifest key."""
    try:
        text = files[MANIFEST_NAME].decode("utf-8")
    except KeyError:
        raise ManifestError([(MANIFEST_NAME, "missing")]) from None
    except UnicodeDecodeError:
        raise ManifestError([(MANIFEST_NAME, "not UTF-8 text")]) from None
    manifest = load_manifest(text)
    problems = []
    for backend, names in manifest.sources.items():
        for index, name in enumerate(names):
            if name not in files:
                problems.append((f"sources.{backend}.{index}", f"{name!r} is not in the package"))
    if manifest.prepare is not None:
        pass  # the prepare kernel is a symbol inside the package's own sources
    for index, fmt in enumerate(manifest.formats):
        reason = check_format(manifest.weights, fmt) if not problems else None
        if reason:
            problems.append((f"formats.{index}", reason))
    if problems:
        raise ManifestError(problems)
    return KernelPackage(manifest, root, files, builtin=builtin)


def load_folder(root: Path, builtin: bool = False) -> KernelPackage:
    return load_files(read_folder(root), root, builtin=builtin)


@cache
def builtin_packages() -> dict[str, KernelPackage]:
    """The library shipped with Tunebase, by name (each folder of ``kernels/library`` with a manifest)."""
    found = {}
    for manifest in sorted(LIBRARY.glob(f"*/{MANIFEST_NAME}")):
        package = load_folder(manifest.parent, builtin=True)
        found[package.name] = package
    return found


def builtin_for_phase(phase: str) -> KernelPackage:
    try:
        return builtin_packages()[BUILTIN_FOR_PHASE[phase]]
    except KeyError:
        raise KeyError(f"no built-in kernel package for phase {phase!r}") from None


def materialize(files: dict[str, bytes], version: str, cache_dir: Path) -> Path:
    """Write an uploaded package to ``cache_dir/packages/<version>`` once; returns that folder."""
    target = Path(cache_dir) / "packages" / version
    if (target / MANIFEST_NAME).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{version[:12]}-", dir=target.parent))
    try:
        for name, data in files.items():
            path = staging / name
            if not path.resolve().is_relative_to(staging.resolve()):
                raise PackageArchiveError(f"{name!r} escapes the package folder")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        try:
            os.replace(staging, target)
        except OSError:  # another worker won the race: its copy has the same content
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


@lru_cache(maxsize=64)
def package_at(root: str) -> KernelPackage:
    """The package in a folder (built-in or materialized upload; both are immutable while we run)."""
    path = Path(root).resolve()
    for package in builtin_packages().values():
        if package.root.resolve() == path:
            return package
    return load_folder(path)


def package_for(phase: str, kernel_root: str = "", kernel: str = "") -> KernelPackage:
    """What a task runs: the package at ``kernel_root``, else the built-in named ``kernel``, else the
    phase's built-in one."""
    if kernel_root:
        package = package_at(kernel_root)
    elif kernel:
        try:
            package = builtin_packages()[kernel]
        except KeyError:
            raise KeyError(
                f"package {kernel!r} is not built in and the task names no folder for it"
            ) from None
    else:
        package = builtin_for_phase(phase)
    if kernel and package.name != kernel:
        raise ValueError(f"the folder {kernel_root} holds package {package.name}, not {kernel}")
    return package
