"""Winners with runner-up and margin (DESIGN §7 winner item)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.api.deps import Caller, get_session, require_scope
from service.db.models import Winner

router = APIRouter(prefix="/v1/winners", tags=["winners"])


def winner_item(w: Winner) -> dict[str, Any]:
    return {
        "arch": w.arch,
        "phase": w.phase,
        "kernel": w.kernel,
        "kernel_version": w.kernel_version,
        "format": w.format,
        "codebook": w.codebook,
        "m": w.m,
        "n": w.n,
        "k": w.k,
        "shape": w.shape,
        "variant": w.variant,
        "median_us": w.median_us,
        "runner_up": w.runner_up,
        "runner_up_median_us": w.runner_up_median_us,
        "margin": w.margin,
        "margin_ci": [w.margin_ci_lo, w.margin_ci_hi] if w.margin_ci_lo is not None else None,
        "decided": w.decided,
        "tie_group": list(w.tie_group or []),
        "measurement_id": w.measurement_id,
        "sweep_ids": list(w.sweep_ids or []),
    }


@router.get("")
def list_winners(
    arch: str | None = None,
    phase: str | None = Query(None, pattern="^(decode|prefill)$"),
    kernel: str | None = Query(None, max_length=64, description="kernel package name"),
    format: str | None = None,
    m: int | None = Query(None, ge=1),
    n: int | None = Query(None, ge=1),
    k: int | None = Query(None, ge=1),
    limit: int = Query(500, ge=1, le=5000),
    offset: int = Query(0, ge=0),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    query = select(Winner)
    for column, value in (
        (Winner.arch, arch),
        (Winner.phase, phase),
        (Winner.kernel, kernel),
        (Winner.format, format),
        (Winner.m, m),
        (Winner.n, n),
        (Winner.k, k),
    ):
        if value is not None:
            query = query.where(column == value)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(
        query.order_by(Winner.arch, Winner.phase, Winner.kernel, Winner.format, Winner.n, Winner.k, Winner.m)
        .limit(limit)
        .offset(offset)
    ).all()
    return {"total": total, "limit": limit, "offset": offset, "items": [winner_item(w) for w in rows]}
