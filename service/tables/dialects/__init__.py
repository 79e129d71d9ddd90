"""Registry of table dialects by name (a plain dict: add a dialect by adding an entry).

Three kinds: the Llaminar dialects emit the phase's built-in package only (their names and fields are
Llaminar's); `json` serves any phase and any package; `struct-table` and its CUDA form `cuda-struct-table`
are bound to one package's `[table]`.
"""

from __future__ import annotations

from collections.abc import Collection

from kernels.packages.package import KernelPackage
from service.tables.codecs import PhaseCodec, first_rejection
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


def get_dialect(
    name: str,
    phase: str | None = None,
    package: KernelPackage | None = None,
    variants: Collection[str] | None = None,
) -> TableDialect:
    """Look a dialect up, with the known names in the error; `phase` binds phase-agnostic ones and
    `package` (None: the phase's built-in) the package-bound ones and json."""
    if name in PACKAGE_BOUND:
        if package is None:
            raise KeyError(f"dialect {name!r} needs a kernel package")
        return PACKAGE_BOUND[name](package)
    if name in PHASE_AGNOSTIC:
        return PHASE_AGNOSTIC[name](phase or (package.phase if package else "decode"), package, variants)
    try:
        return DIALECTS[name]
    except KeyError:
        raise KeyError(f"unknown table dialect {name!r}; known: {list(DIALECT_NAMES)}") from None


def dialect_phases(name: str) -> set[str]:
    """Phases a dialect can emit."""
    if name in PHASE_AGNOSTIC or name in PACKAGE_BOUND:
        return {"decode", "prefill"}
    return {get_dialect(name).phase}


def dialect_problem(name: str, package: KernelPackage, variants: Collection[str] | None = None) -> str | None:
    """Why `name` cannot emit `package`'s table (None when it can).

    ``variants``: the names the table must hold (e.g. the stored winners'; imported Llaminar data keeps
    Llaminar's names); None checks the package's whole space."""
    if name in PHASE_AGNOSTIC:
        codec = PHASE_AGNOSTIC[name](package.phase, package, variants).codec
        rejection = first_rejection(codec, variants or ())
        if rejection is None:
            return None
        return f"dialect {name} describes {package.name} by its parameters; {rejection}"
    if name in PACKAGE_BOUND:
        try:
            PACKAGE_BOUND[name](package)
        except TableShapeError as error:
            return str(error)
        foreign = sorted(v for v in (variants or ()) if not package.is_variant_name(v))
        if foreign:
            return f"dialect {name}: {foreign[0]!r} is not a {package.name} variant ({len(foreign)} such)"
        return None
    dialect = get_dialect(name)
    if package.phase != dialect.phase:
        return f"dialect {name} emits {dialect.phase} tables, not {package.phase}"
    phase_codec: PhaseCodec | None = getattr(dialect, "codec", None)
    if phase_codec is None:
        return None
    rejection = first_rejection(phase_codec, variants if variants is not None else package.all_names())
    if rejection is None:  # Llaminar's structs: every variant must fit their fields
        return None
    return f"dialect {name} cannot express {package.name}'s variants ({rejection}); use struct-table or json"


def default_dialect(phase: str, package: KernelPackage, variants: Collection[str] | None = None) -> str:
    """Llaminar's include when the variants fit it, else the package's own struct table, else json."""
    for name in (f"llaminar-rocm-{phase}", StructTableDialect.name):
        if name in DIALECT_NAMES and dialect_problem(name, package, variants) is None:
            return name
    return JsonDialect.name


__all__ = [
    "DIALECTS",
    "DIALECT_NAMES",
    "ON_REQUEST_ONLY",
    "TableDialect",
    "default_dialect",
    "dialect_phases",
    "dialect_problem",
    "get_dialect",
]
