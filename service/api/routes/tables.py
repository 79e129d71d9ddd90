"""Table versions: generate from winners, list, read, fetch the .inc text."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, JsonValue
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kernels.arches import ARCH_PATTERN
from service.api.deps import MAX_ID, MAX_OFFSET, Caller, get_session, require_scope, row_or_404
from service.api.errors import ERROR_RESPONSES, NOT_FOUND
from service.api.errors import _response as _error
from service.db.models import TableVersion
from service.kernel_store import PackageNotFound
from service.tables.collapse import AliasConflict
from service.tables.dialects import DIALECT_NAMES, dialect_phases
from service.tables.diff import diff_versions
from service.tables.validate import TableValidationError
from service.tables.versions import (
    NoWinners,
    default_table_dialect,
    generate_and_store,
    latest_version,
    table_item,
    table_package,
)

router = APIRouter(prefix="/v1/tables", tags=["tables"], responses={**ERROR_RESPONSES})
TableId = Path(ge=1, le=MAX_ID, description="table version id")


DIALECT_ENUM: list[JsonValue] = list(DIALECT_NAMES)  # every dialect, the package-bound struct-table too


class TableRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    arch: str = Field(min_length=1, max_length=32, examples=["gfx906"])
    phase: str = Field("decode", pattern="^(decode|prefill)$")
    dialect: str | None = Field(
        None,
        examples=["llaminar-rocm-decode", "struct-table"],
        description="default: llaminar-rocm-<phase> when the package's variants fit Llaminar's fields, "
        "else struct-table, else json",
        json_schema_extra={"enum": DIALECT_ENUM},
    )
    kernel: str | None = Field(
        None,
        min_length=1,
        max_length=140,
        pattern=r"^[a-z0-9][a-z0-9-]*(@[0-9a-f]{1,64})?$",
        description="kernel package (name or name@sha256-prefix) whose winners the table holds; "
        "default: the phase's built-in package",
        examples=["rowsplit-gemv"],
    )


def _field_error(field: str, message: str) -> None:
    raise RequestValidationError([{"loc": ("body", field), "msg": message, "type": "value_error"}])


@router.post(
    "",
    status_code=201,
    responses={
        404: _error("no winners for this arch and phase"),
        409: _error("the generated table failed validation"),
        422: _error("bad request, or winners no one table can serve (aliases without a common variant)"),
    },
)
def generate_table(
    request: TableRequest,
    _caller: Caller = Depends(require_scope("submit")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    dialect = request.dialect
    if dialect is None:
        try:
            dialect = default_table_dialect(session, request.arch, request.phase, request.kernel)
        except PackageNotFound as error:
            _field_error("kernel", str(error))
    assert dialect is not None
    if dialect not in DIALECT_NAMES:
        _field_error("dialect", f"unknown dialect; known: {list(DIALECT_NAMES)}")
    if request.phase not in dialect_phases(dialect):
        _field_error("phase", f"dialect {dialect} does not emit {request.phase} tables")
    try:
        table_package(session, request.phase, dialect, request.kernel, request.arch)
    except (PackageNotFound, ValueError) as error:
        _field_error("kernel", str(error))
    try:
        version = generate_and_store(session, request.arch, request.phase, dialect, request.kernel)
    except NoWinners as error:
        raise HTTPException(404, str(error)) from None
    except AliasConflict as error:
        where = f"arch={request.arch} phase={request.phase}"
        _field_error("arch", f"the winners of {where} cannot make one table: {error}")
    except (TableValidationError, ValueError) as error:
        raise HTTPException(409, f"table failed validation: {error}") from None
    session.commit()
    return table_item(version)


@router.get("")
def list_tables(
    arch: str | None = Query(None, max_length=32, pattern=ARCH_PATTERN),
    phase: str | None = Query(None, pattern="^(decode|prefill)$"),
    dialect: str | None = Query(None, max_length=40, examples=["llaminar-rocm-decode"]),
    kernel: str | None = Query(None, max_length=64, description="kernel package name"),
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    query = select(TableVersion)
    for column, value in (
        (TableVersion.arch, arch),
        (TableVersion.phase, phase),
        (TableVersion.dialect, dialect),
        (TableVersion.kernel, kernel),
    ):
        if value is not None:
            query = query.where(column == value)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(TableVersion.id.desc()).limit(limit).offset(offset)).all()
    return {"total": total, "limit": limit, "offset": offset, "items": [table_item(v) for v in rows]}


@router.get("/latest", response_class=PlainTextResponse, responses={**NOT_FOUND})
def latest_inc(
    arch: str = Query(..., min_length=1, max_length=32),
    phase: str = Query("decode", pattern="^(decode|prefill)$"),
    dialect: str | None = Query(
        None, max_length=40, description="default: as for POST /v1/tables", examples=["struct-table"]
    ),
    kernel: str | None = Query(None, max_length=64, description="kernel package name; default: built-in"),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> PlainTextResponse:
    if dialect is None:
        try:
            dialect = default_table_dialect(session, arch, phase, kernel)
        except PackageNotFound as error:
            raise HTTPException(404, str(error)) from None
    version = latest_version(session, arch, phase, dialect, kernel)
    if version is None:
        raise HTTPException(404, f"no table for arch={arch} phase={phase} dialect={dialect} kernel={kernel}")
    return PlainTextResponse(version.content, headers={"X-Table-Id": str(version.id), "ETag": version.sha256})


@router.get("/{table_id}", responses={**NOT_FOUND})
def get_table(
    table_id: int = TableId,
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    version = row_or_404(session, TableVersion, table_id, "table")
    return {**table_item(version), "entries": version.entries, "metrics": version.metrics}


@router.get("/{table_id}/inc", response_class=PlainTextResponse, responses={**NOT_FOUND})
def get_table_inc(
    table_id: int = TableId,
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> PlainTextResponse:
    version = row_or_404(session, TableVersion, table_id, "table")
    return PlainTextResponse(version.content, headers={"ETag": version.sha256})


@router.get("/{table_id}/diff", responses={**NOT_FOUND})
def diff_table(
    table_id: int = TableId,
    base: int | None = Query(
        None, ge=1, le=MAX_ID, description="base version id; default: this version's parent"
    ),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """Entries added, removed and changed between `base` and this version, with regret changes."""
    head = row_or_404(session, TableVersion, table_id, "table")
    base_id = base if base is not None else head.parent_id
    if base_id is None:
        raise HTTPException(404, f"table {table_id} has no parent; pass ?base=ID")
    old = row_or_404(session, TableVersion, base_id, "table")
    if (old.arch, old.phase) != (head.arch, head.phase):
        raise RequestValidationError(
            [
                {
                    "loc": ("query", "base"),
                    "msg": f"base {old.id} is {old.arch}/{old.phase}, not {head.arch}/{head.phase}",
                    "type": "value_error",
                }
            ]
        )
    return diff_versions(old, head)
