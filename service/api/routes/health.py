"""Liveness and readiness (DB connection pool, and the broker when one is configured)."""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from sqlalchemy import Engine, text
from sqlalchemy.pool import QueuePool

from service.api.deps import get_settings_dep
from service.api.responses import SafeJSONResponse
from service.config import Settings

router = APIRouter(tags=["health"])
BROKER_TIMEOUT_SECONDS = 2.0
# Probes get threads of their own: under load the shared pool of worker threads is what is exhausted.
_PROBE_THREADS = anyio.CapacityLimiter(2)


class Readiness(BaseModel):
    status: str = Field(examples=["ready"], description="ready | not ready")
    database: str = Field(examples=["ok"], description="ok, or the reason it is not")
    broker: str = Field(examples=["ok"], description="ok, embedded (no broker configured), or the reason")
    pool: dict[str, int] = Field(
        description="connections in use and the most the pool hands out",
        examples=[{"in_use": 2, "limit": 20}],
    )


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


def pool_usage(engine: Engine) -> tuple[int, int | None]:
    """(connections checked out, most the pool will hand out; None = unbounded)."""
    pool = engine.pool
    if isinstance(pool, QueuePool):
        overflow = pool._max_overflow  # no public accessor; -1 means unbounded
        return pool.checkedout(), None if overflow < 0 else pool.size() + overflow
    checkedout = getattr(pool, "checkedout", None)
    return (int(checkedout()) if callable(checkedout) else 0), None


def database_check(engine: Engine) -> str:
    """Never waits on an exhausted pool: a probe that queues behind the traffic it reports on is late."""
    in_use, limit = pool_usage(engine)
    if limit is not None and in_use >= limit:
        return f"error: connection pool exhausted ({in_use} of {limit} connections in use)"
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as error:
        return f"error: {type(error).__name__}: {error}"
    return "ok"


def broker_check(broker_url: str) -> str:
    if not broker_url:
        return "embedded"
    try:
        import redis

        client = redis.Redis.from_url(
            broker_url, socket_timeout=BROKER_TIMEOUT_SECONDS, socket_connect_timeout=BROKER_TIMEOUT_SECONDS
        )
        try:
            client.ping()
        finally:
            client.close()
    except Exception as error:
        return f"error: {type(error).__name__}: {error}"
    return "ok"


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "the database or the broker is not usable"}},
)
async def readyz(request: Request, settings: Settings = Depends(get_settings_dep)) -> Any:
    """Ready when a database connection is free and works, and the broker (if any) answers."""
    engine: Engine = request.app.state.session_factory.kw["bind"]
    database = await anyio.to_thread.run_sync(partial(database_check, engine), limiter=_PROBE_THREADS)
    in_use, limit = pool_usage(engine)
    broker = await anyio.to_thread.run_sync(
        partial(broker_check, settings.broker_url), limiter=_PROBE_THREADS
    )
    ready = database == "ok" and broker in ("ok", "embedded")
    body = Readiness(
        status="ready" if ready else "not ready",
        database=database,
        broker=broker,
        pool={"in_use": in_use, "limit": -1 if limit is None else limit},
    )
    return SafeJSONResponse(status_code=200 if ready else 503, content=body.model_dump())
