"""JSON that always encodes: a stored lone surrogate (written before text was validated) is sent
as a JSON escape instead of failing the whole response with a 500."""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse


def json_bytes(content: Any) -> bytes:
    """The body SafeJSONResponse sends, for callers that keep rendered bytes (service/api/read_cache.py)."""
    try:
        return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:  # only text that UTF-8 cannot hold; json escapes it as \\udXXX
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


class SafeJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json_bytes(content)
