"""Dispatch-table generation: winners -> validated C++ `.inc` (or JSON) per dialect."""

from service.tables.generate import (
    GENERATOR_NAME,
    GENERATOR_VERSION,
    generate_decode_table,
    generate_table,
)
from service.tables.model import (
    KNOWN_CODEBOOKS,
    GeneratedTable,
    PointTimes,
    TableChoice,
    TableMetrics,
)
from service.tables.validate import TableValidationError, ValidationReport, validate_table

__all__ = [
    "GENERATOR_NAME",
    "GENERATOR_VERSION",
    "KNOWN_CODEBOOKS",
    "GeneratedTable",
    "PointTimes",
    "TableChoice",
    "TableMetrics",
    "TableValidationError",
    "ValidationReport",
    "generate_decode_table",
    "generate_table",
    "validate_table",
]
