"""Winners with runner-up and margin (DESIGN §7 winner item)."""

from __future__ import annotations

from functools import partial
from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kernels.arches import ARCH_PATTERN
from service.api.deps import MAX_ID, MAX_OFFSET, authorize, bearer, presented_token
from service.api.errors import ERROR_RESPONSES
from service.api.read_cache import cache_of, conditional
from service.api.responses import json_bytes
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


@router.get(
    "",
    response_model=WinnerList,
    responses={304: {"description": "unchanged since the ETag sent in If-None-Match"}},
)
async def list_winners(
    request: Request,
    arch: str | None = Query(None, max_length=32, pattern=ARCH_PATTERN),
    phase: str | None = Query(None, pattern="^(decode|prefill)$"),
    kernel: str | None = Query(None, max_length=64, description="kernel package name"),
    format: str | None = Query(None, max_length=16),
    m: int | None = Query(None, ge=1, le=MAX_ID),
    n: int | None = Query(None, ge=1, le=MAX_ID),
    k: int | None = Query(None, ge=1, le=MAX_ID),
    limit: int = Query(500, ge=1, le=5000),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    if_none_match: str | None = Header(
        None, max_length=2000, description="an ETag of an earlier answer: 304 while it still holds"
    ),
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
) -> Response:
    """Rendered once per change of the data (service/api/read_cache.py), then served as bytes.

    The hottest read: the token check and the generation check are one statement, and with the rendering
    (only on a change) take one hop to a worker thread, instead of one hop per dependency.
    """
    token = presented_token(request, credentials, "read")
    filters = (arch, phase, kernel, format, m, n, k)
    settings = request.app.state.settings
    cache = cache_of(request)

    def render(session: Session) -> bytes:
        return json_bytes(winners_page(session, *filters, limit=limit, offset=offset))

    result = await cache.run(
        partial(
            cache.read,
            ("winners", filters, limit, offset),
            token,
            lambda grant: authorize(settings, "read", token, grant),
            render,
        )
    )
    return conditional(if_none_match, result, "application/json")


def winners_page(
    session: Session,
    arch: str | None,
    phase: str | None,
    kernel: str | None,
    format: str | None,
    m: int | None,
    n: int | None,
    k: int | None,
    limit: int,
    offset: int,
) -> dict[str, Any]:
    # Plain rows, not ORM instances: on a miss this is what the request costs.
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
    return {"total": total, "limit": limit, "offset": offset, "items": [winner_item(w) for w in rows]}
