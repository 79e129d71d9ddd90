"""Sweep routes: thin wrappers over service.sweeps.service."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query
from fastapi.exceptions import RequestValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kernels.arches import ARCH_PATTERN
from service.api.deps import (
    MAX_ID,
    MAX_OFFSET,
    Caller,
    get_session,
    get_settings_dep,
    require_scope,
    row_or_404,
    worker_presence,
)
from service.api.errors import ERROR_RESPONSES, NOT_FOUND
from service.api.errors import _response as _error
from service.api.responses import SafeJSONResponse
from service.config import Settings
from service.db.models import Sweep
from service.sweeps.availability import Presence
from service.sweeps.service import (
    IdempotencyConflict,
    InvalidSpec,
    cancel_sweep,
    submit_sweep,
    sweep_status_body,
)
from service.sweeps.spec import SweepSpec

router = APIRouter(prefix="/v1/sweeps", tags=["sweeps"], responses={**ERROR_RESPONSES})
SweepId = Path(ge=1, le=MAX_ID, description="sweep id")


@router.post(
    "",
    status_code=202,
    responses={
        200: {"description": "the Idempotency-Key named an earlier identical sweep (created: false)"},
        409: _error("the Idempotency-Key was used for a different sweep"),
    },
)
def create_sweep(
    spec: SweepSpec,
    idempotency_key: str | None = Header(None, alias="Idempotency-Key", max_length=200),
    caller: Caller = Depends(require_scope("submit")),
    session: Session = Depends(get_session),
    settings: Settings = Depends(get_settings_dep),
    presence: Presence = Depends(worker_presence),
) -> Any:
    try:
        sweep, created = submit_sweep(session, spec, idempotency_key, caller.name)
    except InvalidSpec as error:
        raise RequestValidationError(
            [{"loc": ("body", *p.location), "msg": p.message, "type": "value_error"} for p in error.problems]
        ) from None
    except IdempotencyConflict as error:
        raise HTTPException(409, str(error)) from None
    if created:
        sweep.owner_token_id = caller.token_id
    session.commit()
    if created and settings.broker_url:  # embedded path: the in-process worker polls the DB instead
        from workers.enqueue import enqueue_sweep

        enqueue_sweep(settings, session, sweep.id)
    body = sweep_status_body(session, sweep, presence)
    body["created"] = created
    return SafeJSONResponse(status_code=202 if created else 200, content=body)


@router.get("")
def list_sweeps(
    status: str | None = Query(None, pattern="^(queued|running|done|failed|cancelled)$"),
    arch: str | None = Query(None, max_length=32, pattern=ARCH_PATTERN),
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    query = select(Sweep)
    if status:
        query = query.where(Sweep.status == status)
    if arch:
        query = query.where(Sweep.arch == arch)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    sweeps = session.scalars(query.order_by(Sweep.id.desc()).limit(limit).offset(offset)).all()
    return {
        "total": total,
        "limit": limit,
        "offset": offset,
        "items": [sweep_status_body(session, s) for s in sweeps],
    }


@router.get("/{sweep_id}", responses={**NOT_FOUND})
def get_sweep(
    sweep_id: int = SweepId,
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
    presence: Presence = Depends(worker_presence),
) -> dict[str, Any]:
    return sweep_status_body(session, row_or_404(session, Sweep, sweep_id, "sweep"), presence)


@router.post("/{sweep_id}/cancel", responses={**NOT_FOUND})
def cancel(
    sweep_id: int = SweepId,
    caller: Caller = Depends(require_scope("submit")),
    session: Session = Depends(get_session),
    presence: Presence = Depends(worker_presence),
) -> dict[str, Any]:
    """Only the token that submitted the sweep, or an admin token, may cancel it."""
    sweep = row_or_404(session, Sweep, sweep_id, "sweep")
    if not caller.is_admin and (sweep.owner_token_id is None or sweep.owner_token_id != caller.token_id):
        raise HTTPException(403, "only the token that submitted this sweep, or an admin token, may cancel it")
    cancelled = cancel_sweep(session, sweep)
    session.commit()
    body = sweep_status_body(session, sweep, presence)
    body["cancelled_tasks"] = cancelled
    return body
