"""Registry of table dialects by name (a plain dict: add a dialect by adding an entry).

Three kinds: the Llaminar dialects emit the phase's built-in package only (their names and fields are
Llaminar's); `json` serves any phase and any package; `struct-table` and its CUDA form `cuda-struct-table`
are bound to one package's `[table]`.
"""

from __future__ import annotations

from kernels.packages.package import KernelPackage
from service.tables.dialects.base import TableDialect
from service.tables.dialects.cuda_struct_table import CudaStructTableDialect
from service.tables.dialects.json_table import JsonDialect
from service.tables.dialects.llaminar_rocm_decode import LlaminarRocmDecodeDialect
from service.tables.dialects.llaminar_rocm_prefill import LlaminarRocmPrefillDialect
from service.tables.dialects.struct_table import StructTableDialect, TableShapeError

DIALECTS: dict[str, TableDialect] = {
    LlaminarRocmDecodeDialect.name: LlaminarRocmDecodeDialect(),
    LlaminarRocmPrefillDialect.name: LlaminarRocmPrefillDialect(),
    JsonDialect.name: JsonDialect("decode"),
}
# Dialects that serve any phase: bound to the phase at lookup.
PHASE_AGNOSTIC: dict[str, type[JsonDialect]] = {JsonDialect.name: JsonDialect}
# Dialects bound to one kernel package at lookup (any phase).
PACKAGE_BOUND: dict[str, type[StructTableDialect]] = {
    StructTableDialect.name: StructTableDialect,
    CudaStructTableDialect.name: CudaStructTableDialect,  # struct-table, __host__ __device__, variant list
}
ON_REQUEST_ONLY: frozenset[str] = frozenset({CudaStructTableDialect.name})  # not regenerated nightly
DIALECT_NAMES: tuple[str, ...] = tuple(sorted({*DIALECTS, *PACKAGE_BOUND}))


def get_dialect(name: str, phase: str | None = None, package: KernelPackage | None = None) -> TableDialect:
    """Look a dialect up, with the known names in the error; `phase` binds phase-agnostic ones and
    `package` (None: the phase's built-in) the package-bound ones and json."""
    if name in PACKAGE_BOUND:
        if package is None:
            raise KeyError(f"dialect {name!r} needs a kernel package")
        return PACKAGE_BOUND[name](package)
    if name in PHASE_AGNOSTIC:
        return PHASE_AGNOSTIC[name](phase or (package.phase if package else "decode"), package)
    try:
        return DIALECTS[name]
    except KeyError:
        raise KeyError(f"unknown table dialect {name!r}; known: {list(DIALECT_NAMES)}") from None


def dialect_phases(name: str) -> set[str]:
    """Phases a dialect can emit."""
    if name in PHASE_AGNOSTIC or name in PACKAGE_BOUND:
        return {"decode", "prefill"}
    return {get_dialect(name).phase}


def dialect_problem(name: str, package: KernelPackage) -> str | None:
    """Why `name` cannot emit `package`'s table (None when it can)."""
    if name in PHASE_AGNOSTIC:
        return None
    if name in PACKAGE_BOUND:
        try:
            PACKAGE_BOUND[name](package)
        except TableShapeError as error:
            return str(error)
        return None
    if not package.builtin:
        return (
            f"dialect {name} emits the built-in package's Llaminar table; "
            f"use struct-table or json for {package.name}"
        )
    return None


__all__ = [
    "DIALECTS",
    "DIALECT_NAMES",
    "ON_REQUEST_ONLY",
    "TableDialect",
    "dialect_phases",
    "dialect_problem",
    "get_dialect",
]
