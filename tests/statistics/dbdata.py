"""Insert measurements with per-dispatch rows straight into a real (migrated) database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from kernels.formats.registry import FORMATS
from kernels.packages.loader import builtin_packages
from service.db.models import Device, Dispatch, Measurement, Variant
from service.statistics.summary import summarize_ns

POINT: dict[str, Any] = {"arch": "host", "phase": "decode", "format": "Q8_0", "m": 1, "n": 512, "k": 256}


def device(session: Session, driver: str = "6.1", cus: int = 2) -> Device:
    row = Device(
        backend="host",
        arch="host",
        name="cpu",
        compute_units=cus,
        uuid=f"u-{driver}-{cus}",
        driver_version=driver,
        runtime_version="cc 12",
    )
    session.add(row)
    session.flush()
    return row


def add_measurement(
    session: Session,
    variant: str,
    times_us: Sequence[float] | None,
    dev: Device | None,
    source_hash: str = "src1",
    median_us: float | None = None,
    parity: bool = True,
    kernel: str = "tb-decode",
) -> Measurement:
    """One measurement of a package at POINT; ``times_us=None`` stores a summary only (like an import)."""
    parsed = builtin_packages()["tb-decode"].parse(variant, "host")
    var = session.scalar(select(Variant).where(Variant.family == kernel, Variant.name == variant))
    if var is None:
        var = Variant(family=kernel, name=variant, params=dict(parsed.params), declared_order=parsed.order)
        session.add(var)
        session.flush()
    ns = [int(t * 1000) for t in times_us] if times_us is not None else []
    summary = summarize_ns(ns)
    row = Measurement(
        variant_id=var.id,
        device_id=dev.id if dev else None,
        codebook=FORMATS["Q8_0"].codebook,
        shape="S",
        source="sweep",
        source_hash=source_hash,
        toolchain="cc 12",
        kernel=kernel,
        n_dispatches=len(ns),
        parity_pass=parity,
        median_us=summary.median_us if summary else median_us,
        **POINT,
    )
    session.add(row)
    session.flush()
    if ns:
        session.execute(
            insert(Dispatch),
            [
                {"measurement_id": row.id, "seq": i, "device_ns": t, "wall_ns": t, "buffer_index": 0}
                for i, t in enumerate(ns)
            ],
        )
    return row


def noisy(rng: np.random.Generator, median: float, cv: float = 0.02, n: int = 60) -> list[float]:
    return list(median * np.exp(cv * rng.standard_normal(n)))
