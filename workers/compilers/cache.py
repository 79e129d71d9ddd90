"""Content-addressed compile cache: one code object per (family, format kind, arch) unit.

The key hashes everything that changes the binary (DESIGN §5.6): the source *and every
header it includes* (quoted includes, followed recursively from the source's directory),
family, format kind, arch, the compiler's identity and version, its flags and the defines.
Writes go to a temp file then ``os.replace``, so concurrent workers never read half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from workers.compilers.base import INCLUDE_DIR, Compiler, CompileResult
from workers.compilers.lock import sweep_stale_temps, temp_prefix, unit_lock

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def source_closure(source: Path, include_dirs: tuple[Path, ...] = ()) -> dict[str, str]:
    """The source and every quoted include it reaches: {include name: text}.

    A quoted include is looked up next to the including file, then in ``include_dirs``
    (the compiler's -I order).
    """
    seen: dict[str, str] = {}
    stack: list[tuple[str, Path]] = [(source.name, source)]
    while stack:
        name, path = stack.pop()
        if name in seen or not path.is_file():
            continue
        text = path.read_text()
        seen[name] = text
        for inc in _INCLUDE_RE.findall(text):
            for folder in (path.parent, *include_dirs):
                if (folder / inc).is_file():
                    stack.append((inc, folder / inc))
                    break
    return seen


def source_hash(source: Path, include_dirs: tuple[Path, ...] = ()) -> str:
    """sha256 over the source closure (include names and contents, in sorted order)."""
    h = hashlib.sha256()
    for rel, text in sorted(source_closure(source, include_dirs).items()):
        h.update(rel.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()


def cache_key(
    source: Path, family: str, kind: str, arch: str, compiler: Compiler, defines: dict[str, str]
) -> str:
    blob = json.dumps(
        {
            "source": source_hash(source, (INCLUDE_DIR,)),
            "family": family,
            "kind": kind,
            "arch": arch,
            "compiler": compiler.identity(),
            "flags": list(compiler.flags(arch)),
            "defines": dict(sorted(defines.items())),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class CachedCompile:
    result: CompileResult
    key: str
    source_hash: str
    compiled: bool  # False: served from the cache


class CompileCache:
    """Code objects under ``root/<key[:2]>/<family>_<kind>_<arch>_<key[:24]>.co``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path_for(self, key: str, family: str, kind: str, arch: str) -> Path:
        return self.root / key[:2] / f"{family}_{kind}_{arch}_{key[:24]}.co"

    def get_or_compile(
        self, compiler: Compiler, source: Path, family: str, kind: str, arch: str, defines: dict[str, str]
    ) -> CachedCompile:
        """Reuse a cached object or compile one; failures are returned (and not cached)."""
        src_hash = source_hash(source)
        key = cache_key(source, family, kind, arch, compiler, defines)
        final = self.path_for(key, family, kind, arch)
        log_path = final.with_suffix(".log")
        if final.is_file():
            log = log_path.read_text() if log_path.is_file() else ""
            return CachedCompile(CompileResult(True, log, final), key, src_hash, compiled=False)
        final.parent.mkdir(parents=True, exist_ok=True)
        with unit_lock(final.with_suffix(".lock")) as waited:  # one compiler per unit on this host
            if final.is_file():  # the one we waited for compiled it
                log = log_path.read_text() if log_path.is_file() else ""
                return CachedCompile(CompileResult(True, log, final), key, src_hash, compiled=False)
            if waited is not None:  # the lock is ours: a killed compiler's temporaries are litter
                sweep_stale_temps(final)
            return self._compile_locked(compiler, source, arch, defines, final, key, src_hash)

    def _compile_locked(
        self, compiler: Compiler, source: Path, arch: str, defines: dict[str, str], final: Path, key: str,
        src_hash: str,
    ) -> CachedCompile:  # fmt: skip
        log_path = final.with_suffix(".log")
        fd, tmp_name = tempfile.mkstemp(prefix=temp_prefix(final), suffix=".tmp", dir=final.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            result = compiler.compile(source, arch, defines, tmp)
            if result.ok:
                log_path.write_text(result.log)
                os.replace(tmp, final)
                result = CompileResult(True, result.log, final)
        finally:
            if tmp.exists():
                tmp.unlink()
        return CachedCompile(result, key, src_hash, compiled=True)
