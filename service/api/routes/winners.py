"""Winners with runner-up and margin (DESIGN §7 winner item)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.api.deps import MAX_ID, MAX_OFFSET, Caller, get_session, require_scope
from service.api.errors import ERROR_RESPONSES
from service.api.responses import SafeJSONResponse
from service.db.models import Winner

router = APIRouter(prefix="/v1/winners", tags=["winners"], responses={**ERROR_RESPONSES})


class WinnerItem(BaseModel):
    arch: str
    phase: str
    format: str
    codebook: int
    m: int
    n: int
    k: int
    shape: str
    variant: str
    median_us: float
    runner_up: str | None
    runner_up_median_us: float | None
    margin: float | None
    margin_ci: list[float | None] | None = Field(description="[lo, hi] of the margin; null when undecided")
    decided: bool
    tie_group: list[Any]
    measurement_id: int
    sweep_ids: list[Any]


class WinnerList(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[WinnerItem]


def winner_item(w: Any) -> dict[str, Any]:
    """From a Winner or a plain row of the winners table (same attribute names)."""
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


@router.get("", response_model=WinnerList)
def list_winners(
    arch: str | None = Query(None, max_length=32),
    phase: str | None = Query(None, pattern="^(decode|prefill)$"),
    kernel: str | None = Query(None, max_length=64, description="kernel package name"),
    format: str | None = Query(None, max_length=16),
    m: int | None = Query(None, ge=1, le=MAX_ID),
    n: int | None = Query(None, ge=1, le=MAX_ID),
    k: int | None = Query(None, ge=1, le=MAX_ID),
    limit: int = Query(500, ge=1, le=5000),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> SafeJSONResponse:
    # Plain rows and a ready JSON response: ORM instances and FastAPI's generic encoder cost more than
    # the query itself on this hot read (bench/api_load.py measures it).
    query = select(*Winner.__table__.columns)
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
    rows = session.execute(
        query.order_by(Winner.arch, Winner.phase, Winner.kernel, Winner.format, Winner.n, Winner.k, Winner.m)
        .limit(limit)
        .offset(offset)
    ).all()
    body = {"total": total, "limit": limit, "offset": offset, "items": [winner_item(w) for w in rows]}
    return SafeJSONResponse(body)
