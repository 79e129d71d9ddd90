"""Registry of table dialects by name."""

from __future__ import annotations

from service.tables.dialects.base import TableDialect
from service.tables.dialects.llaminar_rocm_decode import LlaminarRocmDecodeDialect

DIALECTS: dict[str, TableDialect] = {
    LlaminarRocmDecodeDialect.name: LlaminarRocmDecodeDialect(),
}


def get_dialect(name: str) -> TableDialect:
    """Look a dialect up, with the known names in the error."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise KeyError(f"unknown table dialect {name!r}; known: {sorted(DIALECTS)}") from None


__all__ = ["DIALECTS", "TableDialect", "get_dialect"]
