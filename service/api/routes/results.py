"""Measurements, filterable by point, variant and sweep: what every winner and table is built from."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from kernels.arches import ARCH_PATTERN
from service.api.deps import (
    MAX_ID,
    Caller,
    PageParams,
    get_session,
    page_params,
    paginate,
    require_scope,
)
from service.api.errors import ERROR_RESPONSES
from service.db.models import Measurement, Variant

router = APIRouter(prefix="/v1/results", tags=["results"], responses=ERROR_RESPONSES)

RESULTS_EXAMPLE = {
    "total": 1,
    "limit": 50,
    "offset": 0,
    "items": [
        {
            "id": 17,
            "sweep_id": 3,
            "task_id": 9,
            "arch": "gfx906",
            "phase": "decode",
            "kernel": "tb-decode",
            "kernel_version": "9c2e…",
            "format": "Q4_0",
            "codebook": 0,
            "shape": "Qwen36_FFN_GateUp",
            "m": 1,
            "n": 17408,
            "k": 5120,
            "variant": "KB8/TW8",
            "n_dispatches": 40,
            "median_us": 61.2,
            "point_estimate": "median",
            "min_us": 60.1,
            "p10_us": 60.5,
            "p90_us": 63.0,
            "mean_us": 61.6,
            "stddev_us": 0.9,
            "cv": 0.015,
            "wall_median_us": 68.4,
            "parity": {
                "pass": True,
                "cosine": 0.99999,
                "rel_l2": 0.0004,
                "max_abs": 0.002,
                "sampled_rows": None,
            },
            "error": None,
            "source": "sweep",
            "source_hash": "3f1c…",
            "toolchain": "hipcc 5.7",
            "device_id": 1,
            "artifact_id": 2,
            "created_at": "2026-12-01T10:00:00+00:00",
        }
    ],
}


# What `median_us` holds, per source: a trainer CSV reports min/mean/stddev but no median, and its own
# ranking statistic (min) is what was stored; clients must not compare it with a sweep's median unawares.
POINT_ESTIMATES = {"sweep": "median", "llaminar-csv": "min", "rocprof": "median"}


def point_estimate(source: str) -> str:
    return POINT_ESTIMATES.get(source, "median")


def measurement_item(m: Measurement) -> dict[str, Any]:
    return {
        "id": m.id,
        "sweep_id": m.sweep_id,
        "task_id": m.task_id,
        "arch": m.arch,
        "phase": m.phase,
        "kernel": m.kernel,
        "kernel_version": m.kernel_version,
        "format": m.format,
        "codebook": m.codebook,
        "shape": m.shape,
        "m": m.m,
        "n": m.n,
        "k": m.k,
        "variant": m.variant.name,
        "n_dispatches": m.n_dispatches,
        "median_us": m.median_us,
        "point_estimate": point_estimate(m.source),  # the statistic median_us carries (see POINT_ESTIMATES)
        "min_us": m.min_us,
        "p10_us": m.p10_us,
        "p90_us": m.p90_us,
        "mean_us": m.mean_us,
        "stddev_us": m.stddev_us,
        "cv": m.cv,
        "wall_median_us": m.wall_median_us,
        "parity": {
            "pass": m.parity_pass,
            "cosine": m.cosine,
            "rel_l2": m.rel_l2,
            "max_abs": m.max_abs,
            "sampled_rows": m.parity_sampled_rows,
        },
        "error": m.error,
        "source": m.source,
        "source_hash": m.source_hash,
        "toolchain": m.toolchain,
        "device_id": m.device_id,
        "artifact_id": m.artifact_id,
        "created_at": m.created_at.isoformat() if m.created_at else None,
    }


@router.get("", responses={200: {"content": {"application/json": {"example": RESULTS_EXAMPLE}}}})
def list_results(
    arch: str | None = Query(None, max_length=32, pattern=ARCH_PATTERN, examples=["gfx906"]),
    phase: str | None = Query(None, pattern="^(decode|prefill)$"),
    kernel: str | None = Query(None, max_length=64, examples=["rowsplit-gemv"], description="package name"),
    format: str | None = Query(None, max_length=16, examples=["Q4_0"]),
    shape: str | None = Query(None, max_length=120, examples=["Qwen36_FFN_GateUp"]),
    m: int | None = Query(None, ge=1, le=MAX_ID),
    n: int | None = Query(None, ge=1, le=MAX_ID),
    k: int | None = Query(None, ge=1, le=MAX_ID),
    variant: str | None = Query(None, max_length=80, examples=["KB8/TW8"]),
    sweep: int | None = Query(None, ge=1, le=MAX_ID, description="sweep id"),
    parity: bool | None = Query(None, description="true: only passing variants; false: only failures"),
    page: PageParams = Depends(page_params),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """Newest first. Each item carries the summary statistics, parity figures and provenance keys."""
    query = select(Measurement).options(joinedload(Measurement.variant))
    for column, value in (
        (Measurement.arch, arch),
        (Measurement.phase, phase),
        (Measurement.kernel, kernel),
        (Measurement.format, format),
        (Measurement.shape, shape),
        (Measurement.m, m),
        (Measurement.n, n),
        (Measurement.k, k),
        (Measurement.sweep_id, sweep),
        (Measurement.parity_pass, parity),
    ):
        if value is not None:
            query = query.where(column == value)
    if variant is not None:
        query = query.where(Measurement.variant_id.in_(select(Variant.id).where(Variant.name == variant)))
    return paginate(session, query.order_by(Measurement.id.desc()), page, measurement_item)
