"""One error body for every failure: {"error": {"code", "message", "fields": [{"field", "message"}]}}.

Validation problems (422), HTTP errors raised by routes (401/403/404/405/406/409), values the database
cannot hold (422 instead of a driver crash) and unexpected exceptions (500) all leave in this shape, so a
client needs one parser. Routes list `ERROR_RESPONSES` so the OpenAPI document says so too.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import DataError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from kernels.arches import ARCH_PATTERN, ARCHES
from service.api.responses import SafeJSONResponse

log = logging.getLogger(__name__)

HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "too_large",
    422: "validation_failed",
    429: "rate_limited",
    503: "unavailable",
}


class FieldError(BaseModel):
    field: str = Field(examples=["formats.1"])
    message: str = Field(examples=["unknown format 'Q9_9'"])


class ErrorDetail(BaseModel):
    code: str = Field(examples=["validation_failed"])
    message: str = Field(examples=["formats.1: unknown format 'Q9_9'"])
    fields: list[FieldError] = Field(default_factory=list)


class ErrorBody(BaseModel):
    """The body of every non-2xx response."""

    error: ErrorDetail


def _response(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


# For `APIRouter(responses=...)`: documents the shared error body on every route.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: _response("missing, unknown or revoked bearer token"),
    403: _response("the token lacks the scope this route needs"),
    422: _response("invalid input; `fields` names each offending field"),
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: _response("no such resource")}


def field_path(location: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in location]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def error_body(code: str, message: str, fields: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or []}}


def _message(error: dict[str, Any]) -> str:
    if error.get("type") == "string_unicode":  # pydantic-core met a lone UTF-16 surrogate
        return "must be valid Unicode text (a lone UTF-16 surrogate such as \\ud800 is not)"
    pattern = str(error.get("ctx", {}).get("pattern"))
    if error.get("type") == "string_pattern_mismatch" and pattern == ARCH_PATTERN:
        return f"unknown arch {error.get('input')!r}; known: {', '.join(ARCHES)}"
    if error.get("type") == "string_pattern_mismatch" and "\\x00" in str(error.get("ctx", {}).get("pattern")):
        return "must not contain a NUL character"
    return str(error.get("msg", ""))


def _field_error(error: dict[str, Any]) -> dict[str, str]:
    loc = tuple(error.get("loc", ()))
    if error.get("type") == "json_invalid":  # loc is ("body", character offset): name the body, say where
        where = f" at character {loc[1]}" if len(loc) > 1 else ""
        return {
            "field": "body",
            "message": f"not valid JSON{where}: {error.get('ctx', {}).get('error', '')}".rstrip(": "),
        }
    return {"field": field_path(loc), "message": _message(error)}


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this request's path (Starlette names only the first route's)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = [_field_error(e) for e in exc.errors()]
        message = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        return SafeJSONResponse(status_code=422, content=error_body("validation_failed", message, fields))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = HTTP_CODES.get(exc.status_code, "error")
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:  # Allow lists every method of the path, not only one route's
            headers["Allow"] = ", ".join(allowed_methods(request))
        return SafeJSONResponse(
            status_code=exc.status_code, content=error_body(code, str(exc.detail)), headers=headers or None
        )

    async def _out_of_range(_request: Request, exc: Exception) -> JSONResponse:
        # e.g. an id beyond the column's integer range: the client's mistake, not a server fault
        message = f"a value is out of the range the database can hold: {type(exc).__name__}"
        return SafeJSONResponse(status_code=422, content=error_body("validation_failed", message))

    async def _busy(_request: Request, _exc: Exception) -> JSONResponse:
        # every pooled connection stayed busy for the whole pool timeout: overload, not a fault
        message = "the database connection pool is exhausted; retry later"
        return SafeJSONResponse(
            status_code=503, content=error_body("unavailable", message), headers={"Retry-After": "1"}
        )

    app.add_exception_handler(PoolTimeout, _busy)
    app.add_exception_handler(DataError, _out_of_range)
    app.add_exception_handler(OverflowError, _out_of_range)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return SafeJSONResponse(
            status_code=500, content=error_body("internal_error", f"internal error: {type(exc).__name__}")
        )
