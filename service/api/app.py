"""The FastAPI application factory; routers are one module per resource."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service.api.errors import install_error_handlers
from service.api.limits import BodySizeLimit, QueryTextGuard
from service.api.openapi import install_openapi
from service.api.read_cache import THREADS, ReadCache
from service.api.responses import SafeJSONResponse
from service.api.routes import (
    compare,
    devices,
    health,
    imports_llaminar,
    imports_rocprof,
    kernels,
    measurements,
    metrics,
    observed,
    profiles,
    registry,
    results,
    sweeps,
    tables,
    tokens,
    winners,
)
from service.config import Settings, get_settings
from service.dashboard import router as dashboard
from service.db.session import session_factory

API_DESCRIPTION = """Tunebase: sweeps of kernel variants timed per dispatch, winners with their margins,
and generated dispatch tables. Authenticate with `Authorization: Bearer <token>` (`tunebase token create`)."""


def create_app(settings: Settings | None = None, start_embedded_worker: bool = True) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker = None
        if settings.embedded and settings.embedded_worker and start_embedded_worker:
            from workers.embedded import start_embedded_worker as start

            worker = start(settings, app.state.session_factory)
            app.state.embedded_arches = worker.arches if worker is not None else []
        yield
        if worker is not None:
            worker.stop()

    app = FastAPI(
        title="Tunebase",
        version="0.1.0",
        description=API_DESCRIPTION,
        lifespan=lifespan,
        default_response_class=SafeJSONResponse,
    )
    app.state.settings = settings
    app.state.session_factory = session_factory(settings.resolved_database_url)
    app.state.embedded_arches = []  # set by the lifespan when the embedded worker starts
    app.state.read_cache = ReadCache(app.state.session_factory, threads=min(THREADS, settings.db_pool_size))
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(QueryTextGuard)
    metrics.install_metrics(app)
    routers = (health, metrics, sweeps, winners, tables, results, measurements, devices, profiles, observed)
    for module in routers:
        app.include_router(module.router)
    app.include_router(compare.router)
    app.include_router(registry.router)
    app.include_router(imports_llaminar.router)
    app.include_router(imports_rocprof.router)
    app.include_router(kernels.router)
    app.include_router(tokens.router)
    dashboard.install(app)
    install_openapi(app)
    return app
