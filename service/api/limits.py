"""Request body size limit (ASGI middleware): 413 before a large body is read, or as soon as a
streamed (chunked) body passes the limit; nothing behind it ever holds more than the limit."""

from __future__ import annotations

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
