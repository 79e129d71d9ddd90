"""Seed a database with measurements and their dispatch rows (COPY), as a finished sweep would leave them."""

from __future__ import annotations

import random

from sqlalchemy.orm import Session

from service.db.models import Measurement, Sweep, Task, Variant
from workers.bulk import DispatchRow, insert_dispatch_rows


def seed_dispatches(session: Session, measurements: int, rows_each: int, label: str = "seed") -> list[int]:
    """`measurements` measurements of one task, each with `rows_each` dispatch rows; their ids."""
    sweep = Sweep(arch="host", phase="decode", kernel="tb-decode", spec={}, labels={"seed": label})
    session.add(sweep)
    session.flush()
    task = Task(sweep_id=sweep.id, arch="host", phase="decode", kernel="tb-decode", format="Q8_0",
                shape="Seed", n=64, k=64, m=1, variants=[], state="done")  # fmt: skip
    variants = [
        Variant(family="tb-decode", name=f"KB{i}/TW4-{label}", params={}, declared_order=i)
        for i in range(measurements)
    ]  # one variant per measurement: together they decide a winner at the point
    session.add_all([task, *variants])
    session.flush()
    rows = [
        Measurement(
            task_id=task.id,
            sweep_id=sweep.id,
            variant_id=variant.id,
            arch="host",
            phase="decode",
            kernel="tb-decode",
            format="Q8_0",
            codebook=19,
            shape="Seed",
            n=64,
            k=64,
            m=1,
            n_dispatches=rows_each,
            median_us=20.0 + index,
            parity_pass=True,
        )
        for index, variant in enumerate(variants)
    ]
    session.add_all(rows)
    session.flush()
    rng = random.Random(0)
    dispatches: list[DispatchRow] = []
    for measurement in rows:
        base = int(measurement.median_us or 20) * 1000
        for seq in range(rows_each):
            device = base + rng.randrange(500)
            dispatches.append((measurement.id, seq, device, device + 3_000, seq % 8, None))
    insert_dispatch_rows(session, dispatches)
    return [m.id for m in rows]
