"""Which measurements still count (DESIGN §5.6): provenance keys and the staleness rule.

A measurement's *provenance* is what changes its numbers without changing its point:
kernel source hash, toolchain, driver and runtime versions, and the device (arch and
compute-unit count; an MI300X partition is not a full MI300X).

The *current* provenance of a point is that of its newest measurement (highest id,
i.e. the last one stored; parity or errors do not matter: the newest run shows what
the code, toolchain and device are now). A measurement is *stale* when any field of
its provenance differs from the current one. Fields compare exactly, so a missing
value ('' / None, e.g. an imported summary without device data) differs from a known
one: a sweep with full provenance supersedes an import at the same point, while
imports alone stay comparable among themselves. Stale results are kept and shown,
flagged; they never take part in winner selection.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from service.db.models import Device, Measurement


@dataclass(frozen=True)
class Provenance:
    source_hash: str
    toolchain: str
    driver_version: str
    runtime_version: str
    arch: str
    compute_units: int | None


def is_stale(measurement: Provenance, current: Provenance | None) -> bool:
    """True when ``measurement`` was taken under other code/toolchain/driver/device than ``current``.

    With no current provenance (nothing measured at the point) nothing is stale.
    """
    return current is not None and measurement != current


def provenance_of(measurement: Measurement, device: Device | None) -> Provenance:
    """The provenance of a stored measurement (its device row gives driver, runtime and CU count)."""
    return Provenance(
        source_hash=measurement.source_hash or "",
        toolchain=measurement.toolchain or "",
        driver_version=(device.driver_version or "") if device is not None else "",
        runtime_version=(device.runtime_version or "") if device is not None else "",
        arch=device.arch if device is not None else measurement.arch,
        compute_units=device.compute_units if device is not None else None,
    )


def current_provenance(rows: Iterable[tuple[Measurement, Device | None]]) -> Provenance | None:
    """Provenance of the newest (highest-id) measurement among ``rows`` of one point."""
    newest: tuple[Measurement, Device | None] | None = None
    for measurement, device in rows:
        if newest is None or measurement.id > newest[0].id:
            newest = (measurement, device)
    return provenance_of(*newest) if newest is not None else None


def stale_flags(rows: Iterable[tuple[Measurement, Device | None]]) -> dict[int, bool]:
    """measurement id -> stale, for the measurements of ONE point (group by point before calling)."""
    items = list(rows)
    current = current_provenance(items)
    return {m.id: is_stale(provenance_of(m, d), current) for m, d in items}
