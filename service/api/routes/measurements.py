"""One measurement, and its per-dispatch rows as JSON (paginated) or CSV (streamed, every row)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.deps import MAX_ID, Caller, PageParams, get_session, paginate, require_scope, row_or_404
from service.api.errors import ERROR_RESPONSES, NOT_FOUND
from service.api.routes.results import measurement_item
from service.db.models import Artifact, Dispatch, Measurement

router = APIRouter(prefix="/v1/measurements", tags=["results"], responses={**ERROR_RESPONSES, **NOT_FOUND})

CSV_COLUMNS = ("seq", "device_ns", "wall_ns", "buffer_index")
CSV_CHUNK = 2000
DISPATCHES_EXAMPLE = {
    "measurement_id": 17,
    "total": 2,
    "limit": 1000,
    "offset": 0,
    "items": [
        {"seq": 0, "device_ns": 61210, "wall_ns": 68400, "buffer_index": 0},
        {"seq": 1, "device_ns": 61050, "wall_ns": 67920, "buffer_index": 1},
    ],
}
CSV_EXAMPLE = "seq,device_ns,wall_ns,buffer_index\n0,61210,68400,0\n1,61050,67920,1\n"

MeasurementId = Path(ge=1, le=MAX_ID, description="measurement id (see GET /v1/results)")


@router.get("/{measurement_id}")
def get_measurement(
    measurement_id: int = MeasurementId,
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """The measurement plus its compiled artifact's resources (ISA figures and diagnosis, where known)."""
    measurement = row_or_404(session, Measurement, measurement_id, "measurement")
    artifact = session.get(Artifact, measurement.artifact_id) if measurement.artifact_id else None
    body = measurement_item(measurement)
    body["artifact"] = (
        {
            "id": artifact.id,
            "backend": artifact.backend,
            "toolchain": artifact.toolchain,
            "flags": list(artifact.flags or []),
            "ok": artifact.ok,
            "resources": dict(artifact.resources or {}),
        }
        if artifact is not None
        else None
    )
    return body


def wants_csv(request: Request, fmt: str | None) -> bool:
    if fmt is not None:
        return fmt == "csv"
    accept = request.headers.get("accept", "")
    return "text/csv" in accept and "application/json" not in accept


def _csv_rows(session: Session, measurement_id: int) -> Iterator[str]:
    """Streams in chunks through the request's own session (FastAPI closes it after the response is
    sent), so a CSV download holds one pooled connection, never two: a second checkout per request
    is what let concurrent downloads exhaust the pool and wait on each other. A failure mid-stream
    propagates, so the server aborts the chunked body and the client sees a truncated transfer."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    query = (
        select(Dispatch.seq, Dispatch.device_ns, Dispatch.wall_ns, Dispatch.buffer_index)
        .where(Dispatch.measurement_id == measurement_id)
        .order_by(Dispatch.seq)
        .execution_options(yield_per=CSV_CHUNK)
    )
    for count, row in enumerate(session.execute(query), start=1):
        writer.writerow(["" if value is None else value for value in row])
        if count % CSV_CHUNK == 0:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


@router.get(
    "/{measurement_id}/dispatches",
    responses={
        200: {
            "description": "JSON (paginated envelope) or CSV (every row, streamed)",
            "content": {
                "application/json": {"example": DISPATCHES_EXAMPLE},
                "text/csv": {"schema": {"type": "string"}, "example": CSV_EXAMPLE},
            },
        }
    },
)
def get_dispatches(
    request: Request,
    measurement_id: int = MeasurementId,
    format: str | None = Query(
        None, pattern="^(json|csv)$", description="json or csv; default from the Accept header (text/csv)"
    ),
    limit: int = Query(1000, ge=1, le=100_000, description="JSON only: rows per page"),
    offset: int = Query(0, ge=0, le=MAX_ID, description="JSON only: rows to skip"),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> Any:
    """Per-dispatch device time (profiler or in-harness clock) beside host wall time, in launch order."""
    measurement = row_or_404(session, Measurement, measurement_id, "measurement")
    if wants_csv(request, format):
        return StreamingResponse(
            _csv_rows(session, measurement.id),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="measurement-{measurement.id}.csv"'},
        )

    query = select(Dispatch).where(Dispatch.measurement_id == measurement.id).order_by(Dispatch.seq)
    body = paginate(
        session,
        query,
        PageParams(limit, offset),
        lambda d: {
            "seq": d.seq,
            "device_ns": d.device_ns,
            "wall_ns": d.wall_ns,
            "buffer_index": d.buffer_index,
        },
    )
    return {"measurement_id": measurement.id, **body}
