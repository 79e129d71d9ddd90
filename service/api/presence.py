"""Asking which workers are alive: the embedded threads of this app, or the workers on the broker.

With a broker, the workers themselves answer a Celery `active_queues` broadcast (the mechanism of
`celery inspect`): a worker that does not answer within the timeout is not counted. Answers (and
failures to ask) are cached briefly, so polling clients do not turn every status request into a
broadcast.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from service.sweeps.availability import Presence

log = logging.getLogger(__name__)

BROADCAST_TIMEOUT_S = 1.0
CACHE_SECONDS = 3.0
_cache: dict[str, tuple[float, Presence]] = {}
_cache_lock = threading.Lock()


def broker_presence(broker_url: str, timeout: float = BROADCAST_TIMEOUT_S) -> Presence:
    """Count the workers consuming each `arch.<arch>` queue; cached for CACHE_SECONDS."""
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(broker_url)
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
    try:
        presence = Presence(_ask_workers(broker_url, timeout), "broker")
    except Exception as error:  # an unreachable broker: say so rather than claim zero workers
        log.warning("cannot ask the workers over %s: %s", broker_url, error)
        presence = Presence({}, "broker", error=str(error) or type(error).__name__)
    with _cache_lock:
        _cache[broker_url] = (time.monotonic(), presence)
    return presence


def _ask_workers(broker_url: str, timeout: float) -> dict[str, int]:
    if broker_url.startswith(("redis://", "rediss://")):  # fail in a second, not after kombu's retries
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        client = redis.Redis.from_url(
            broker_url, socket_connect_timeout=timeout, socket_timeout=timeout, retry=Retry(NoBackoff(), 0)
        )
        try:
            client.ping()
        finally:
            client.close()
    from workers.celery_app import celery_for

    replies = celery_for(broker_url).control.inspect(timeout=timeout).active_queues() or {}
    online: Counter[str] = Counter()
    for queues in replies.values():
        for queue in queues or []:
            name = str(queue.get("name", ""))
            if name.startswith("arch."):
                online[name.removeprefix("arch.")] += 1
    return dict(online)
