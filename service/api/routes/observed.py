"""Observed shapes: engines report points their table missed; `"include_observed": true` sweeps tune them."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from kernels.arches import ARCH_NAMES, require_arch
from kernels.formats.registry import FORMATS
from service.api.deps import Caller, PageParams, get_session, page_params, paginate, require_scope
from service.api.errors import ERROR_RESPONSES
from service.db.models import ObservedShape
from service.observed import bucket_m, default_phase, record_observed

router = APIRouter(prefix="/v1/observed-shapes", tags=["observed"], responses=ERROR_RESPONSES)


class ObservedReport(BaseModel):
    """One GEMV/GEMM an engine dispatched through its fallback because no exact table entry matched."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "arch": "gfx906",
                    "format": "Q4_K",
                    "m": 1,
                    "n": 17408,
                    "k": 5120,
                    "source": "llaminar@node7",
                }
            ]
        },
    )

    arch: str = Field(
        json_schema_extra={"enum": list(ARCH_NAMES)}, description="one row of kernels/arches.py"
    )
    format: str = Field(min_length=1, max_length=16)
    m: int = Field(ge=1, le=1 << 20)
    n: int = Field(gt=0, le=1 << 28)
    k: int = Field(gt=0, le=1 << 24)
    phase: Literal["decode", "prefill"] | None = Field(
        None, description="default: decode for M <= 4, else prefill"
    )
    source: str = Field("", max_length=120, description="who reported it (engine, host)")

    @field_validator("arch")
    @classmethod
    def _known_arch(cls, value: str) -> str:
        return require_arch(value)


def observed_item(row: ObservedShape) -> dict[str, Any]:
    return {
        "id": row.id,
        "arch": row.arch,
        "phase": row.phase,
        "format": row.format,
        "m": row.m,
        "m_bucket": bucket_m(row.phase, row.m),
        "n": row.n,
        "k": row.k,
        "count": row.count,
        "source": row.source,
        "first_seen": row.first_seen.isoformat() if row.first_seen else None,
        "last_seen": row.last_seen.isoformat() if row.last_seen else None,
        "last_sweep_id": row.last_sweep_id,
    }


@router.post("", status_code=201)
def report_observed(
    report: ObservedReport,
    _caller: Caller = Depends(require_scope("submit")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """Idempotent per point: a repeat bumps `count` and `last_seen` instead of adding a row."""
    spec = FORMATS.get(report.format)
    if spec is None:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "format"),
                    "msg": f"unknown format; known: {', '.join(FORMATS)}",
                    "type": "value_error",
                }
            ]
        )
    if report.k % spec.block_weights:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "k"),
                    "msg": f"K={report.k} is not a multiple of the {spec.block_weights}-weight block",
                    "type": "value_error",
                }
            ]
        )
    phase = report.phase or default_phase(report.m)
    row = record_observed(
        session, report.arch, phase, report.format, report.m, report.n, report.k, report.source
    )
    session.commit()
    return observed_item(row)


@router.get("")
def list_observed(
    arch: str | None = Query(None, max_length=32, examples=["gfx906"]),
    phase: str | None = Query(None, pattern="^(decode|prefill)$"),
    format: str | None = Query(None, max_length=16),
    pending: bool | None = Query(None, description="true: not yet offered to any sweep"),
    page: PageParams = Depends(page_params),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """Most reported first."""
    query = select(ObservedShape)
    for column, value in (
        (ObservedShape.arch, arch),
        (ObservedShape.phase, phase),
        (ObservedShape.format, format),
    ):
        if value is not None:
            query = query.where(column == value)
    if pending is True:
        query = query.where(ObservedShape.last_sweep_id.is_(None))
    elif pending is False:
        query = query.where(ObservedShape.last_sweep_id.is_not(None))
    query = query.order_by(ObservedShape.count.desc(), ObservedShape.id)
    return paginate(session, query, page, observed_item)
