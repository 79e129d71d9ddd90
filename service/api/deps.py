"""Shared request dependencies: settings, a DB session per request, the caller and its scopes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from service.auth import granted, lookup_token
from service.config import Settings

bearer = HTTPBearer(auto_error=False)


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_session(request: Request) -> Iterator[Session]:
    session: Session = request.app.state.session_factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


@dataclass(frozen=True)
class Caller:
    name: str
    scopes: frozenset[str]


def require_scope(scope: str) -> Callable[..., Caller]:
    def dependency(
        request: Request,
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
        session: Session = Depends(get_session),
    ) -> Caller:
        settings: Settings = request.app.state.settings
        if credentials is None:
            if scope == "read" and settings.anonymous_read:
                return Caller(name="anonymous", scopes=frozenset({"read"}))
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "a bearer token is required",
                headers={"WWW-Authenticate": "Bearer"},
            )
        record = lookup_token(session, credentials.credentials)
        if record is None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "unknown or revoked token",
                headers={"WWW-Authenticate": "Bearer"},
            )
        scopes = granted(list(record.scopes))
        if scope not in scopes:
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"this token lacks the {scope!r} scope")
        return Caller(name=record.name, scopes=frozenset(scopes))

    return dependency
