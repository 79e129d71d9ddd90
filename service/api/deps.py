"""Shared request dependencies: settings, a DB session per request, the caller and its scopes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Depends, HTTPException, Query, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from service.api.presence import broker_presence
from service.auth import TokenGrant, granted, lookup_token
from service.config import Settings
from service.db.session import transaction
from service.sweeps.availability import Presence, embedded_presence

bearer = HTTPBearer(auto_error=False)
# A browser signs in once at /login; the token then rides in this HttpOnly, SameSite=Strict cookie.
# It is honoured for the `read` scope only: every mutating route stays bearer-only (no CSRF surface).
SESSION_COOKIE = "tunebase_token"
MAX_OFFSET = 2**31 - 1

# Path ids and integer filters stay inside a 32-bit column's range, so no driver ever sees an overflow.
MAX_ID = 2**31 - 1


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def worker_presence(request: Request) -> Presence:
    """Workers online per arch: the embedded threads of this app, or those answering on the broker."""
    settings: Settings = request.app.state.settings
    if settings.broker_url:
        return broker_presence(settings.broker_url)
    return embedded_presence(getattr(request.app.state, "embedded_arches", []))


def get_session(request: Request) -> Iterator[Session]:
    """The request's session: one transaction, committed when the route returns."""
    with transaction(request.app.state.session_factory) as session:
        yield session


@dataclass(frozen=True)
class Caller:
    name: str
    scopes: frozenset[str]
    token_id: int | None = None  # None: anonymous

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes


def presented_token(
    request: Request, credentials: HTTPAuthorizationCredentials | None, scope: str
) -> str | None:
    """The bearer token, else (for `read` only) the dashboard's sign-in cookie, else None."""
    if credentials is not None:
        return credentials.credentials
    cookie = request.cookies.get(SESSION_COOKIE) if scope == "read" else None
    return cookie or None


def authorize(settings: Settings, scope: str, token: str | None, record: TokenGrant | None) -> Caller:
    """The caller for a presented token and its stored grant (None: unknown or revoked), or 401/403."""
    if token is None:
        if scope == "read" and settings.anonymous_read:
            return Caller(name="anonymous", scopes=frozenset({"read"}))
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "a bearer token is required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if record is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "unknown or revoked token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    scopes = granted(list(record.scopes))
    if scope not in scopes:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"this token lacks the {scope!r} scope")
    return Caller(name=record.name, scopes=frozenset(scopes), token_id=record.id)


def require_scope(scope: str) -> Callable[..., Caller]:
    def dependency(
        request: Request,
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
        session: Session = Depends(get_session),
    ) -> Caller:
        token = presented_token(request, credentials, scope)
        record = lookup_token(session, token) if token is not None else None
        return authorize(request.app.state.settings, scope, token, record)

    return dependency


@dataclass(frozen=True)
class PageParams:
    limit: int
    offset: int


def page_params(
    limit: int = Query(50, ge=1, le=500, description="items per page"),
    offset: int = Query(0, ge=0, le=MAX_OFFSET, description="items to skip"),
) -> PageParams:
    return PageParams(limit, offset)


def paginate(
    session: Session, query: Select[Any], page: PageParams, render: Callable[[Any], dict[str, Any]]
) -> dict[str, Any]:
    """The list envelope every collection route returns: {"total", "limit", "offset", "items"}."""
    total = session.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0
    rows: Sequence[Any] = session.scalars(query.limit(page.limit).offset(page.offset)).all()
    return {"total": total, "limit": page.limit, "offset": page.offset, "items": [render(r) for r in rows]}


Row = TypeVar("Row")


def row_or_404(session: Session, model: type[Row], row_id: int, what: str) -> Row:
    """The row with this primary key, or a 404 naming the missing `what` (one wording for every route)."""
    row = session.get(model, row_id)
    if row is None:
        raise HTTPException(404, f"{what} {row_id} not found")
    return row
