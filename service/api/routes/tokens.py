"""`GET /v1/tokens`, `POST /v1/tokens/{id}/revoke` (scope admin): who holds access, and taking it back."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from service.api.deps import MAX_ID, Caller, get_session, require_scope
from service.api.errors import ERROR_RESPONSES, NOT_FOUND
from service.auth import list_tokens, revoke_token, token_item

router = APIRouter(prefix="/v1/tokens", tags=["tokens"], responses={**ERROR_RESPONSES})


class TokenItem(BaseModel):
    id: int
    name: str
    scopes: list[str] = Field(examples=[["submit"]])
    created_by: str = Field(description="'cli' (tunebase token create) or the admin token that created it")
    created_at: str | None
    revoked: bool
    revoked_at: str | None


class TokenList(BaseModel):
    total: int
    items: list[TokenItem]


@router.get("", response_model=TokenList)
def get_tokens(
    revoked: bool = Query(True, description="include revoked tokens"),
    _caller: Caller = Depends(require_scope("admin")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """Every token's name, scopes and state; the secret itself is never stored, so never shown."""
    items = [token_item(t) for t in list_tokens(session, include_revoked=revoked)]
    return {"total": len(items), "items": items}


@router.post("/{token_id}/revoke", response_model=TokenItem, responses={**NOT_FOUND})
def revoke(
    token_id: int = Path(ge=1, le=MAX_ID),
    _caller: Caller = Depends(require_scope("admin")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """Revoke at once: the next request with that token gets 401. Revoking twice is harmless."""
    record = revoke_token(session, token_id)
    if record is None:
        raise HTTPException(404, f"token {token_id} not found")
    return token_item(record)
