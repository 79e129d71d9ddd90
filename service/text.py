"""Text the database can store and every response can render: no NUL, no lone UTF-16 surrogate.

Postgres refuses NUL in text (a DataError that used to strand a task in "running"), and a lone
surrogate (JSON "\\ud800") is stored but cannot be encoded as UTF-8, so every later page that
renders it fails. Input from clients is refused (`text_problem`); text we produce from untrusted
sources (harness errors, compiler logs) is made storable (`storable`) instead.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import StringConstraints

_BAD = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored as text, or None when it can."""
    found = _BAD.search(value)
    if found is None:
        return None
    char = found.group()
    what = "a NUL character" if char == "\x00" else f"a lone UTF-16 surrogate (U+{ord(char):04X})"
    return f"contains {what} at position {found.start()}"


def storable(value: str, limit: int | None = None) -> str:
    """`value` with NUL and lone surrogates replaced by U+FFFD, cut to `limit` characters (marked)."""
    cleaned = _BAD.sub(REPLACEMENT, value)
    if limit is not None and len(cleaned) > limit:
        marker = "… [truncated]"
        cleaned = cleaned[: max(0, limit - len(marker))] + marker
    return cleaned


def storable_or_none(value: str | None, limit: int | None = None) -> str | None:
    return None if value is None else storable(value, limit)


# Wire types for text from clients. Any length-constrained str makes pydantic-core refuse lone
# surrogates ("unable to parse raw data as a unicode string"); the pattern refuses NUL and says so in
# the OpenAPI schema, so a fuzzer (or a client) knows what is valid before it asks.
NO_NUL = r"^[^\x00]*$"
LABEL_KEY_PATTERN = r"^[A-Za-z0-9_.:/\-]+$"
MAX_LABELS = 32
Label = Annotated[str, StringConstraints(max_length=256, pattern=NO_NUL)]
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=LABEL_KEY_PATTERN)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=80, pattern=NO_NUL)]
ShortText = Annotated[str, StringConstraints(max_length=200, pattern=NO_NUL)]
FileName = Annotated[str, StringConstraints(min_length=1, max_length=300, pattern=NO_NUL)]
