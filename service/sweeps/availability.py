"""Which arches a live worker serves right now, so a sweep never waits silently (DESIGN §7).

Embedded mode knows its own worker threads. With a broker, the workers themselves answer a Celery
`active_queues` broadcast (the same mechanism as `celery inspect`): a worker that does not answer
within the timeout is not counted. Answers are cached briefly so that polling clients do not turn
every status request into a broadcast.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

BROADCAST_TIMEOUT_S = 1.0
CACHE_SECONDS = 3.0
_cache: dict[str, tuple[float, Presence]] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class Presence:
    """Workers online per arch, and how the answer was obtained (named in warnings)."""

    online: Mapping[str, int]
    source: str  # "embedded", "broker", or "none" (no broker and no embedded worker)
    error: str = ""  # the broker could not be asked (the count is then unknown, not zero)

    def count(self, arch: str) -> int:
        return int(self.online.get(arch, 0))


def embedded_presence(arches: Iterable[str]) -> Presence:
    arch_list = list(arches)
    return Presence(dict(Counter(arch_list)), "embedded" if arch_list else "none")


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


def waiting_warnings(arch: str, tasks: Mapping[str, int], presence: Presence) -> list[str]:
    """Why queued tasks of this arch will not start: no live worker serves it (with the count)."""
    if not tasks.get("queued") or presence.count(arch):
        return []
    if presence.error:
        return [
            f"cannot tell whether a worker serves {arch}: the broker did not answer ({presence.error});"
            f" {tasks['queued']} task(s) wait in queue arch.{arch}"
        ]
    served = ", ".join(f"{a} ({n})" for a, n in sorted(presence.online.items())) or "none"
    if presence.source == "none":
        how = "no broker is configured and the embedded worker is off (TUNEBASE_EMBEDDED_WORKER=false)"
    elif presence.source == "embedded":
        how = f"this server's embedded worker serves {served}; set TUNEBASE_BROKER_URL and run a worker"
    else:
        how = f"workers online by arch: {served}; start one"
    return [
        f"no live worker serves {arch} (0 online): {tasks['queued']} task(s) wait until one starts; "
        f"{how} (`tunebase worker --arch {arch}`)"
    ]
