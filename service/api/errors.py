"""One error body for every failure: {"error": {"code", "message", "fields": [{"field", "message"}]}}."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


def field_path(location: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in location]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def error_body(code: str, message: str, fields: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or []}}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = [
            {"field": field_path(e.get("loc", ())), "message": str(e.get("msg", ""))} for e in exc.errors()
        ]
        message = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        return JSONResponse(status_code=422, content=error_body("validation_failed", message, fields))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {401: "unauthorized", 403: "forbidden", 404: "not_found", 409: "conflict"}.get(
            exc.status_code, "error"
        )
        return JSONResponse(
            status_code=exc.status_code,
            content=error_body(code, str(exc.detail)),
            headers=getattr(exc, "headers", None),
        )
