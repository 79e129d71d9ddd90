"""Liveness and readiness (DB, and the broker when one is configured)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.orm import Session

from service.api.deps import get_session, get_settings_dep
from service.config import Settings

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(session: Session = Depends(get_session), settings: Settings = Depends(get_settings_dep)) -> Any:
    checks: dict[str, str] = {}
    try:
        session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as error:
        checks["database"] = f"error: {error}"
    if settings.broker_url:
        try:
            import redis

            redis.Redis.from_url(settings.broker_url, socket_timeout=2).ping()
            checks["broker"] = "ok"
        except Exception as error:
            checks["broker"] = f"error: {error}"
    else:
        checks["broker"] = "embedded"
    ready = all(v in ("ok", "embedded") for v in checks.values())
    return JSONResponse(
        status_code=200 if ready else 503, content={"status": "ready" if ready else "not ready", **checks}
    )
