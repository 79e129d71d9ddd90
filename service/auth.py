"""Bearer tokens with scopes, stored as SHA-256 digests; the plaintext is shown once at creation."""

from __future__ import annotations

import hashlib
import secrets
from typing import Protocol, cast

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from service.db.models import ApiToken, utcnow

SCOPES = ("read", "submit", "admin")
# admin implies everything; submit implies read (a CI token must be able to poll what it submitted)
IMPLIED: dict[str, set[str]] = {
    "admin": {"admin", "submit", "read"},
    "submit": {"submit", "read"},
    "read": {"read"},
}


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_scopes(text: str) -> list[str]:
    scopes = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        raise ValueError(f"scopes must be a comma list of {', '.join(SCOPES)}; got {text!r}")
    return sorted(set(scopes))


def create_token(
    session: Session, name: str, scopes: list[str], entropy_bytes: int = 32, created_by: str = "cli"
) -> str:
    token = "tb_" + secrets.token_urlsafe(entropy_bytes)
    session.add(ApiToken(name=name, token_hash=hash_token(token), scopes=scopes, created_by=created_by))
    session.flush()
    return token


def list_tokens(session: Session, include_revoked: bool = True) -> list[ApiToken]:
    query = select(ApiToken).order_by(ApiToken.id)
    if not include_revoked:
        query = query.where(ApiToken.revoked.is_(False))
    return list(session.scalars(query))


def revoke_token(session: Session, token_id: int) -> ApiToken | None:
    """Revoke by id (idempotent: revoking twice keeps the first time); None when there is no such token."""
    record = session.get(ApiToken, token_id)
    if record is not None and not record.revoked:
        record.revoked = True
        record.revoked_at = utcnow()
        session.flush()
    return record


def token_item(record: ApiToken) -> dict[str, object]:
    """What may be shown about a token: never its digest."""
    return {
        "id": record.id,
        "name": record.name,
        "scopes": list(record.scopes),
        "created_by": record.created_by,
        "created_at": record.created_at.isoformat() if record.created_at else None,
        "revoked": record.revoked,
        "revoked_at": record.revoked_at.isoformat() if record.revoked_at else None,
    }


def lookup_token(session: Session, token: str) -> ApiToken | None:
    record = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(token)))
    if record is None or record.revoked:
        return None
    return record


class TokenGrant(Protocol):
    """What authorising a request needs of a stored token: an ApiToken, or a row of token_grant."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def scopes(self) -> list[str]: ...


def token_grant(connection: Connection, token: str) -> TokenGrant | None:
    """lookup_token for hot read paths: three columns over a Core connection, no ORM object."""
    row = connection.execute(
        select(ApiToken.id, ApiToken.name, ApiToken.scopes).where(
            ApiToken.token_hash == hash_token(token), ApiToken.revoked.is_(False)
        )
    ).first()
    return cast(TokenGrant | None, row)


def granted(scopes: list[str]) -> set[str]:
    result: set[str] = set()
    for scope in scopes:
        result |= IMPLIED.get(scope, set())
    return result
