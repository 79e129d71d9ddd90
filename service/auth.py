"""Bearer tokens with scopes, stored as SHA-256 digests; the plaintext is shown once at creation."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import ApiToken

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


def create_token(session: Session, name: str, scopes: list[str], entropy_bytes: int = 32) -> str:
    token = "tb_" + secrets.token_urlsafe(entropy_bytes)
    session.add(ApiToken(name=name, token_hash=hash_token(token), scopes=scopes))
    session.flush()
    return token


def lookup_token(session: Session, token: str) -> ApiToken | None:
    record = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(token)))
    if record is None or record.revoked:
        return None
    return record


def granted(scopes: list[str]) -> set[str]:
    result: set[str] = set()
    for scope in scopes:
        result |= IMPLIED.get(scope, set())
    return result
