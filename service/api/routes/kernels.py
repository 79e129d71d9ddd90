"""Kernel packages (DESIGN §9): upload a `.tar.gz`, list, show, and pre-screen a version's ISA for an arch.

`POST /v1/kernels` takes the archive's raw bytes as the body (`Content-Type: application/gzip`, what
`curl --data-binary @pkg.tar.gz` and `tunebase kernel push` send). The size limit is checked against
`Content-Length` and again while the body streams in, so an oversized upload is refused (413) without being
held in memory. Every refusal names the manifest key or archive member; nothing is stored on any error.
"""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from kernels.packages.archive import MAX_ARCHIVE_BYTES, PackageArchiveError, read_archive
from kernels.packages.manifest import ManifestError
from service.api.deps import Caller, get_session, require_scope
from service.api.errors import ERROR_RESPONSES, NOT_FOUND, ErrorBody
from service.kernel_analyses import store_prescreen, variant_item
from service.kernel_catalog import kernel_detail, kernel_summaries, kernel_versions
from service.kernel_store import PackageNotFound, get_package, store_package
from workers.prescreen import CompilerUnavailable, PrescreenError, analyse_package, prescreen_arches

router = APIRouter(prefix="/v1/kernels", tags=["kernels"], responses={**ERROR_RESPONSES, **NOT_FOUND})

NAME = Path(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$", description="package name")
VERSION = Path(pattern=r"^[0-9a-f]{1,64}$", description="content sha256 or a unique prefix of it")
ARCHIVE_TYPES = ("application/gzip", "application/x-gzip", "application/x-tar", "application/octet-stream")


class InvalidPoint(BaseModel):
    point: str = Field(examples=["R8/U4"])
    rule: str = Field(examples=["ROWS * UNROLL <= 16"])


class KernelUpload(BaseModel):
    name: str = Field(examples=["rowsplit-gemv"])
    version: str = Field(description="sha256 over the package's files (paths and bytes): the content address")
    sha256: str = Field(description="sha256 of the archive bytes as received")
    ref: str = Field(
        description="what a sweep's `kernel` may name to pin this version",
        examples=["rowsplit-gemv@3f2a9c0d1e2b"],
    )
    phase: str
    variants: int = Field(description="valid variants (largest over the package's backends)")
    backends: dict[str, int] = Field(description="valid variants per backend the package has a source for")
    invalid: list[InvalidPoint] = Field(
        description="points every backend's restrictions remove, with the first rule broken"
    )
    created: bool = Field(
        description="false when these files were stored before (answered 200 instead of 201)"
    )


class KernelVersion(BaseModel):
    version: str
    ref: str
    variants: int
    size_bytes: int
    uploaded_by: str
    created_at: str | None


class KernelSummary(BaseModel):
    name: str
    phase: str
    builtin: bool
    latest: str | None
    versions: list[KernelVersion]


class KernelList(BaseModel):
    total: int
    items: list[KernelSummary]


class AnalysisItem(BaseModel):
    arch: str
    format: str
    variant: str
    symbol: str
    ok: bool
    error: str | None = Field(description="the compiler's message when the variant did not compile")
    resources: dict[str, Any] = Field(
        description="vgpr, arch_vgpr, agpr, sgpr, lds_bytes, scratch_bytes, vgpr_spills, sgpr_spills, "
        "waves_per_simd, limiter, occupancy, census, liveness, hot_loop, disassembly_error, diagnosis "
        "(the `tunebase isa` record; docs/rocm.md)"
    )
    toolchain: str
    created_at: str | None = None


class KernelDetail(BaseModel):
    name: str
    version: str
    ref: str
    phase: str
    builtin: bool
    uploaded_by: str
    created_at: str | None
    manifest: dict[str, Any]
    files: list[dict[str, Any]]
    describe: dict[str, Any]
    variants: dict[str, int]
    invalid: list[InvalidPoint]
    analyses: list[AnalysisItem]


class AnalyzeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    arch: str = Field(json_schema_extra={"enum": list(prescreen_arches())}, examples=["gfx950"])
    formats: list[str] | None = Field(
        None, min_length=1, max_length=64, description="default: every format the package reads"
    )
    variants: list[str] | None = Field(
        None, min_length=1, max_length=4096, description="default: the whole valid space"
    )


class AnalyzeResult(BaseModel):
    kernel: str
    version: str
    arch: str
    toolchain: str
    analysed: int
    failed: int
    spilling: int
    items: list[AnalysisItem]
    not_reached: list[dict[str, str]] = Field(
        default_factory=list, description="variants not compiled because the request's time budget ran out"
    )


def _invalid(fields: list[tuple[str, str]]) -> RequestValidationError:
    return RequestValidationError(
        [{"loc": ("body", *key.split(".")), "msg": msg, "type": "value_error"} for key, msg in fields]
    )


def _too_large(size: int | str) -> HTTPException:
    return HTTPException(413, f"upload is {size} bytes; the limit is {MAX_ARCHIVE_BYTES} bytes")


async def read_limited_body(request: Request, limit: int = MAX_ARCHIVE_BYTES) -> bytes:
    """The body, refused (413) as soon as it is known to exceed ``limit``: header first, then streaming."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(declared)
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise _too_large(f"more than {received}")
        chunks.append(chunk)
    return b"".join(chunks)


_UPLOAD_BODY: dict[str, Any] = {
    "required": True,
    "description": f"the package folder as a .tar.gz (at most {MAX_ARCHIVE_BYTES} bytes) as the raw body",
    "content": {
        kind: {"schema": {"type": "string", "format": "binary"}}
        for kind in ("application/gzip", "application/octet-stream")
    },
}


@router.post(
    "",
    status_code=201,
    response_model=KernelUpload,
    responses={
        200: {"model": KernelUpload, "description": "these files were stored before"},
        413: {"model": ErrorBody, "description": "the archive or a file in it is too large"},
    },
    openapi_extra={"requestBody": _UPLOAD_BODY},
)
async def upload_kernel(
    request: Request,
    response: Response,
    caller: Caller = Depends(require_scope("submit")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """Store a kernel package; the same files always get the same version (201 new, 200 known)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type and content_type not in ARCHIVE_TYPES:
        raise _invalid(
            [
                (
                    "body",
                    f"send the .tar.gz bytes as the body (Content-Type application/gzip), not {content_type}",
                )
            ]
        )
    data = await read_limited_body(request)

    def store() -> dict[str, Any]:
        try:
            files = read_archive(data)
        except PackageArchiveError as error:
            if error.status == 413:
                raise HTTPException(413, str(error)) from None
            raise _invalid([(error.member or "body", str(error))]) from None
        try:
            stored = store_package(session, files, caller.name)
        except ManifestError as error:
            session.rollback()
            raise _invalid(error.problems) from None  # each field is the manifest key it is about
        session.commit()
        package = stored.package
        backends = {b: len(package.space(b)) for b in package.describe()["backends"]}
        return {
            "name": package.name,
            "version": package.version,
            "sha256": hashlib.sha256(data).hexdigest(),
            "ref": package.ref,
            "phase": package.phase,
            "variants": max(backends.values(), default=0),
            "backends": backends,
            "invalid": stored.invalid,
            "created": stored.created,
        }

    body = await run_in_threadpool(store)
    response.status_code = 201 if body["created"] else 200
    return body


@router.get("", response_model=KernelList)
def list_kernels(
    _caller: Caller = Depends(require_scope("read")), session: Session = Depends(get_session)
) -> dict[str, Any]:
    """Built-in and uploaded packages, each with its versions (newest first)."""
    items = kernel_summaries(session)
    return {"total": len(items), "items": items}


@router.get("/{name}", response_model=KernelSummary)
def show_kernel(
    name: str = NAME,
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """One package's versions (newest first)."""
    try:
        return kernel_versions(session, name)
    except PackageNotFound as error:
        raise HTTPException(404, str(error)) from None


@router.get("/{name}/{version}", response_model=KernelDetail)
def show_kernel_version(
    name: str = NAME,
    version: str = VERSION,
    arch: str | None = Query(None, max_length=32, description="only the analyses for this arch"),
    _caller: Caller = Depends(require_scope("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """One version: manifest, files, parameters with their meaning, spaces, stored ISA analyses."""
    try:
        return kernel_detail(session, name, version, arch)
    except PackageNotFound as error:
        raise HTTPException(404, str(error)) from None


@router.post(
    "/{name}/{version}/analyze",
    response_model=AnalyzeResult,
    responses={
        503: {"model": ErrorBody, "description": "the arch's compiler is not installed on this server"}
    },
)
def analyze_kernel(
    request: AnalyzeRequest,
    name: str = NAME,
    version: str = VERSION,
    _caller: Caller = Depends(require_scope("submit")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """Compile every valid variant for an AMD arch (no GPU needed) and store each one's ISA resources.

    A variant that does not compile is listed with the compiler's message; the others are still analysed.
    """
    try:
        package = get_package(session, name, version)
    except PackageNotFound as error:
        raise HTTPException(404, str(error)) from None
    try:
        result = analyse_package(package, request.arch, request.formats, request.variants)
    except PrescreenError as error:
        raise _invalid([(error.field, str(error))]) from None
    except CompilerUnavailable as error:
        raise HTTPException(503, str(error)) from None
    try:
        rows = store_prescreen(session, package.name, package.version, result)
    except IntegrityError:  # a concurrent pre-screen of the same variants stored first: update its rows
        session.rollback()
        rows = store_prescreen(session, package.name, package.version, result)
    session.commit()
    items = [
        {**variant_item(item, result.arch, result.toolchain), "created_at": row.created_at.isoformat()}
        for item, row in zip(result.items, rows, strict=True)
    ]
    return {
        "kernel": package.name,
        "version": package.version,
        "arch": result.arch,
        "toolchain": result.toolchain,
        "analysed": sum(1 for item in result.items if item.ok),
        "failed": sum(1 for item in result.items if not item.ok),
        "spilling": sum(1 for item in result.items if item.spills),
        "items": items,
        "not_reached": [{"format": fmt, "variant": variant} for fmt, variant in result.not_reached],
    }
