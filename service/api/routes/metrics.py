"""Prometheus metrics: request latency (measured in-process) and database gauges read at scrape time.

Gauges come from the database, not from counters in this process, so every API replica reports the same
truth and a restart loses nothing. `/metrics` needs no token: it exposes counts only (like /healthz).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.db.models import Measurement, ObservedShape, Sweep, Task
from service.sweeps.service import TASK_STATES, parity_failed

router = APIRouter(tags=["health"])

SWEEP_STATES = ("queued", "running", "done", "failed", "cancelled")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class DatabaseCollector(Collector):
    def __init__(self, factory: sessionmaker[Session]):
        self._factory = factory

    def collect(self) -> Iterator[Metric]:
        with self._factory() as session:
            sweeps = dict(session.execute(select(Sweep.status, func.count()).group_by(Sweep.status)).all())
            tasks = dict(session.execute(select(Task.state, func.count()).group_by(Task.state)).all())
            # the sum of stored per-measurement counts: cheap even when the dispatch table holds billions
            dispatches = session.scalar(select(func.coalesce(func.sum(Measurement.n_dispatches), 0)))
            measurements = session.scalar(select(func.count()).select_from(Measurement))
            failed_parity = session.scalar(
                select(func.count()).select_from(Measurement).where(parity_failed())
            )
            observed = session.scalar(select(func.count()).select_from(ObservedShape))
        by_status = GaugeMetricFamily("tunebase_sweeps", "sweeps by status", labels=["status"])
        for status in sorted(set(SWEEP_STATES) | set(sweeps)):
            by_status.add_metric([status], float(sweeps.get(status, 0)))
        yield by_status
        by_state = GaugeMetricFamily("tunebase_tasks", "tasks by state", labels=["state"])
        for state in sorted(set(TASK_STATES) | set(tasks)):
            by_state.add_metric([state], float(tasks.get(state, 0)))
        yield by_state
        yield GaugeMetricFamily(
            "tunebase_dispatches_stored", "timed dispatches stored", value=float(dispatches or 0)
        )
        yield GaugeMetricFamily(
            "tunebase_measurements", "measurements stored", value=float(measurements or 0)
        )
        yield GaugeMetricFamily(
            "tunebase_parity_failures",
            "measurements whose variant failed parity",
            value=float(failed_parity or 0),
        )
        yield GaugeMetricFamily(
            "tunebase_observed_shapes", "distinct observed shapes", value=float(observed or 0)
        )


def install_metrics(app: FastAPI) -> None:
    """A registry per app (tests create several apps in one process) plus the latency middleware."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(DatabaseCollector(app.state.session_factory))
    latency = Histogram(
        "tunebase_http_request_duration_seconds",
        "HTTP request latency by route template",
        labelnames=("method", "route", "status"),
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    app.state.metrics_registry = registry

    app.add_middleware(RequestTimer, latency=latency)


class RequestTimer:
    """Pure ASGI (no BaseHTTPMiddleware: that costs every request a task and a copy of its body, and
    times a streamed body only to its headers). Observes until the last body chunk is sent."""

    def __init__(self, app: ASGIApp, latency: Histogram) -> None:
        self.app = app
        self.latency = latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            template = getattr(scope.get("route"), "path", None) or "unmatched"
            self.latency.labels(scope["method"], template, str(status)).observe(time.perf_counter() - started)


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(request: Request) -> Response:
    """Prometheus text exposition format."""
    return Response(generate_latest(request.app.state.metrics_registry), media_type=CONTENT_TYPE_LATEST)
