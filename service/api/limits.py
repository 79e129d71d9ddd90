"""Request limits as ASGI middleware.

BodySizeLimit: 413 before a large body is read, or as soon as a streamed (chunked) body passes the
limit; nothing behind it ever holds more than the limit. QueryTextGuard: a NUL in a query parameter
is a 422 naming the parameter (Postgres cannot compare text holding NUL; the OpenAPI document says
so with a pattern on every free-text parameter).
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.errors import error_body
from service.api.responses import SafeJSONResponse


def too_large(limit: int) -> HTTPException:
    return HTTPException(413, f"request body larger than {limit} bytes (TUNEBASE_MAX_BODY_BYTES)")


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            error = too_large(self.max_bytes)
            response = SafeJSONResponse(status_code=413, content=error_body("too_large", str(error.detail)))
            await response(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise too_large(self.max_bytes)  # the app's handler answers 413
            return message

        await self.app(scope, limited, send)


class QueryTextGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = scope.get("query_string", b"") if scope["type"] == "http" else b""
        if b"%00" in query or b"\x00" in query:
            pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
            bad = sorted({name for name, value in pairs if "\x00" in value or "\x00" in name})
            if bad:
                problem = "must not contain a NUL character"
                fields = [{"field": name.replace("\x00", "\\0"), "message": problem} for name in bad]
                message = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
                body = error_body("validation_failed", message, fields)
                await SafeJSONResponse(status_code=422, content=body)(scope, receive, send)
                return
        await self.app(scope, receive, send)
