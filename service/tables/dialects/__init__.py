"""Registry of table dialects by name (a plain dict: add a dialect by adding an entry)."""

from __future__ import annotations

from service.tables.dialects.base import TableDialect
from service.tables.dialects.json_table import JsonDialect
from service.tables.dialects.llaminar_rocm_decode import LlaminarRocmDecodeDialect
from service.tables.dialects.llaminar_rocm_prefill import LlaminarRocmPrefillDialect

DIALECTS: dict[str, TableDialect] = {
    LlaminarRocmDecodeDialect.name: LlaminarRocmDecodeDialect(),
    LlaminarRocmPrefillDialect.name: LlaminarRocmPrefillDialect(),
    JsonDialect.name: JsonDialect("decode"),
}
# Dialects that serve any phase: bound to the phase at lookup.
PHASE_AGNOSTIC: dict[str, type[JsonDialect]] = {JsonDialect.name: JsonDialect}


def get_dialect(name: str, phase: str | None = None) -> TableDialect:
    """Look a dialect up, with the known names in the error; `phase` binds phase-agnostic ones."""
    if name in PHASE_AGNOSTIC:
        return PHASE_AGNOSTIC[name](phase or "decode")
    try:
        return DIALECTS[name]
    except KeyError:
        raise KeyError(f"unknown table dialect {name!r}; known: {sorted(DIALECTS)}") from None


def dialect_phases(name: str) -> set[str]:
    """Phases a dialect can emit."""
    return {"decode", "prefill"} if name in PHASE_AGNOSTIC else {get_dialect(name).phase}


__all__ = ["DIALECTS", "TableDialect", "dialect_phases", "get_dialect"]
