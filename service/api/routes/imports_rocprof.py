"""`POST /v1/imports/rocprof`, `GET /v1/imports/rocprof[/{id}]`: hand-made rocprof captures (all or nothing).

The POST takes either multipart/form-data (``files`` repeated, optional ``label``: what `curl -F`
sends) or a JSON body ``{"files": [{"name", "content"}], "label"}`` (what the CLI sends). A file
that is unknown or damaged is refused with 422 naming it and its line; nothing is stored then.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from service.api.deps import MAX_ID, Caller, PageParams, get_session, page_params, require_scope
from service.api.errors import ERROR_RESPONSES, NOT_FOUND
from service.imports.rocprof import (
    MAX_FILES,
    CaptureImportError,
    ParsedCapture,
    capture_summary,
    list_captures,
    parse_files,
    store_capture,
)
from service.text import NO_NUL, FileName, ShortText, text_problem

router = APIRouter(prefix="/v1/imports", tags=["imports"], responses={**ERROR_RESPONSES, **NOT_FOUND})

MAX_FILE_BYTES = 64 * 1024 * 1024


class CaptureFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: FileName = Field(examples=["kernel_trace.csv"])
    content: str = Field(max_length=MAX_FILE_BYTES, pattern=NO_NUL)


class RocprofImport(BaseModel):
    """rocprofv3 kernel_trace.csv / kernel_stats.csv or rocprof results.csv / results.stats.csv files."""

    model_config = ConfigDict(extra="forbid")

    label: ShortText = Field("", examples=["mi50 decode q4_0, ROCm 5.7"])
    files: list[CaptureFile] = Field(min_length=1, max_length=MAX_FILES)


class KernelSummary(BaseModel):
    kernel: str
    calls: int
    median_ns: float | None = Field(description="null when only a statistics file named the kernel")
    min_ns: int | None
    max_ns: int | None
    total_ns: int
    average_ns: float | None = Field(None, description="mean duration: all a statistics file gives")
    source: str = Field("dispatches", description="'dispatches' or 'statistics file'")
    package: str | None = Field(None, description="kernel package whose variant symbol this is, if any")
    variant: str | None = Field(None, examples=["KB8/TW8"], description="the variant this kernel is, if any")
    format: str | None = Field(None, examples=["Q4_0"], description="the format, when the symbol names it")


class CaptureFileInfo(BaseModel):
    name: str
    kind: str = Field(examples=["rocprofv3_kernel_trace"])
    rows: int


class CaptureListItem(BaseModel):
    id: int
    label: str
    created_at: str | None
    imported_by: str
    files: list[CaptureFileInfo]
    dispatches: int


class CaptureList(BaseModel):
    total: int
    limit: int
    offset: int
    items: list[CaptureListItem]


class CaptureSummary(BaseModel):
    id: int
    label: str
    created_at: str | None
    files: list[CaptureFileInfo]
    dispatches: int
    kernels: list[KernelSummary]


_REQUEST_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {"schema": RocprofImport.model_json_schema()},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["files"],
                "properties": {
                    "files": {
                        "type": "array",
                        "items": {"type": "string", "format": "binary"},
                        "minItems": 1,
                        "maxItems": MAX_FILES,
                    },
                    "label": {"type": "string", "maxLength": 200},
                },
            }
        },
    },
}


def _invalid(loc: tuple[Any, ...], message: str) -> RequestValidationError:
    return RequestValidationError([{"loc": ("body", *loc), "msg": message, "type": "value_error"}])


async def _multipart(request: Request) -> tuple[list[tuple[str, str]], str, str]:
    """(files, label, field prefix) from a multipart form; bad uploads are 422s naming the part."""
    try:
        form = await request.form(max_files=MAX_FILES, max_fields=16, max_part_size=MAX_FILE_BYTES)
    except HTTPException as error:
        if error.status_code == 413:
            raise  # the body size limit: 413, not a malformed body
        raise _invalid(("files",), f"unreadable multipart body: {error.detail}") from None
    except (ValueError, AssertionError) as error:
        raise _invalid(("files",), f"unreadable multipart body: {error}") from None
    uploads = form.getlist("files")
    if not uploads:
        raise _invalid(("files",), "at least one file part named 'files' is required")
    raw: list[tuple[str, bytes]] = []
    for index, part in enumerate(uploads):
        if not isinstance(part, UploadFile):
            raise _invalid(("files", index), "must be a file part")
        data = await part.read()
        if len(data) > MAX_FILE_BYTES:
            raise _invalid(("files", index), f"larger than {MAX_FILE_BYTES} bytes")
        raw.append((part.filename or f"file{index}", data))
    files = await run_in_threadpool(_decode_uploads, raw)
    label = form.get("label") or ""
    if not isinstance(label, str) or len(label) > 200 or text_problem(label):
        raise _invalid(("label",), "must be text of at most 200 characters, without NUL")
    return files, label, ""


def _decode_uploads(raw: list[tuple[str, bytes]]) -> list[tuple[str, str]]:
    """UTF-8 text of each upload (off the event loop: tens of MB take a while)."""
    files: list[tuple[str, str]] = []
    for index, (name, data) in enumerate(raw):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise _invalid(("files", index), f"{name}: not UTF-8 text (byte {error.start})") from None
        problem = text_problem(name)
        if problem:
            raise _invalid(("files", index), f"file name {problem}")
        if "\x00" in text:
            raise _invalid(("files", index), f"{name}: {text_problem(text)}")
        files.append((name, text))
    return files


async def _json(request: Request) -> tuple[list[tuple[str, str]], str, str]:
    return await run_in_threadpool(_parse_json, await request.body())


def _parse_json(data: bytes) -> tuple[list[tuple[str, str]], str, str]:
    """JSON decoding and validation of a body of up to the size limit: run in a worker thread."""
    try:
        payload = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise _invalid((), f"body is not JSON: {error}") from None
    try:
        body = RocprofImport.model_validate(payload)
    except ValidationError as error:
        problems = error.errors(include_url=False, include_context=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in problems]) from None
    return [(f.name, f.content) for f in body.files], body.label, "content"


def _parse(files: list[tuple[str, str]], leaf: str) -> list[ParsedCapture]:
    try:
        return parse_files(files)
    except CaptureImportError as error:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "files", p.index, *((leaf,) if leaf else ())),
                    "msg": str(p),
                    "type": "value_error",
                }
                for p in error.problems
            ]
        ) from None


@router.post(
    "/rocprof", status_code=201, response_model=CaptureSummary, openapi_extra={"requestBody": _REQUEST_BODY}
)
async def import_rocprof(
    request: Request,
    caller: Caller = Depends(require_scope("submit")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """Store a capture's dispatch rows and statistics; answer with the per-kernel summary."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        files, label, leaf = await _multipart(request)
    else:
        files, label, leaf = await _json(request)
    try:
        label.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid(("label",), "not valid Unicode") from None
    # parsing tens of MB of CSV is CPU work: in a worker thread, never on the event loop
    parsed = await run_in_threadpool(_parse, files, leaf)

    def store() -> dict[str, Any]:
        capture = store_capture(session, parsed, label, caller.name)
        session.commit()
        summary = capture_summary(session, capture.id)
        assert summary is not None
        return summary

    return await run_in_threadpool(store)


@router.get("/rocprof", response_model=CaptureList)
def list_rocprof_captures(
    page: PageParams = Depends(page_params),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """Imported captures, newest first; GET /v1/imports/rocprof/{id} has the per-kernel summary."""
    return list_captures(session, page.limit, page.offset)


@router.get("/rocprof/{capture_id}", response_model=CaptureSummary)
def get_rocprof_capture(
    capture_id: int = Path(ge=1, le=MAX_ID, description="capture id (from POST /v1/imports/rocprof)"),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    summary = capture_summary(session, capture_id)
    if summary is None:
        raise HTTPException(404, f"capture {capture_id} not found")
    return summary
