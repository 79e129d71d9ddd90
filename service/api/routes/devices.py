"""Devices results were measured on (arch + CU count + driver/runtime: the keys of DESIGN §5.6)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.deps import Caller, PageParams, get_session, page_params, paginate, require_scope
from service.api.errors import ERROR_RESPONSES
from service.db.models import Device

router = APIRouter(prefix="/v1/devices", tags=["registry"], responses=ERROR_RESPONSES)


def device_item(d: Device) -> dict[str, Any]:
    return {
        "id": d.id,
        "backend": d.backend,
        "arch": d.arch,
        "name": d.name,
        "compute_units": d.compute_units,
        "uuid": d.uuid,
        "driver_version": d.driver_version,
        "runtime_version": d.runtime_version,
        "hostname": d.hostname,
        "created_at": d.created_at.isoformat() if d.created_at else None,
        "last_seen_at": d.last_seen_at.isoformat() if d.last_seen_at else None,
    }


@router.get("")
def list_devices(
    arch: str | None = Query(None, max_length=32, examples=["gfx906"]),
    backend: str | None = Query(None, pattern="^(rocm|cuda|host)$"),
    page: PageParams = Depends(page_params),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    query = select(Device)
    if arch is not None:
        query = query.where(Device.arch == arch)
    if backend is not None:
        query = query.where(Device.backend == backend)
    return paginate(session, query.order_by(Device.id), page, device_item)
