"""Rendered read responses (winners list, dashboard), kept while the data behind them is unchanged.

The database holds one generation number that triggers bump in the same transaction as any insert,
update or delete on the watched tables (ReadGeneration.WATCHED, migration 0010), whoever the writer is.
A request reads the generation first and the data after it, so what is stored under generation G holds
every change committed up to G (perhaps later ones too, never fewer). Every request checks the
generation, so a committed write is seen by the very next read in every server process: no time-based
expiry and no stale window. Bodies are rendered once per generation and key, then served as bytes with
a strong ETag; `If-None-Match` with that ETag gets 304.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

import anyio
import anyio.to_thread
from fastapi import Request, Response
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from service.db.models import ReadGeneration

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_ENTRIES = 256  # distinct filter/page combinations kept per process; the oldest used goes first


@dataclass(frozen=True)
class Rendered:
    body: bytes
    etag: str  # strong validator: a digest of the body


def rendered(body: bytes) -> Rendered:
    return Rendered(body, '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"')


GENERATION = select(ReadGeneration.value).where(ReadGeneration.id == 1)


def read_generation(session: Session) -> int | None:
    """The current generation, or None when the row is missing (then nothing is cached)."""
    value = session.connection().execute(GENERATION).scalar()  # Core: this runs on every cached read
    return int(value) if value is not None else None


def expected_triggers(dialect: str) -> set[str]:
    """The trigger names migration 0010 creates (one per table on Postgres, one per event on SQLite)."""
    if dialect == "postgresql":
        return {f"read_generation_{table}" for table in ReadGeneration.WATCHED}
    events = ("insert", "update", "delete")
    return {f"read_generation_{table}_{event}" for table in ReadGeneration.WATCHED for event in events}


def triggers_present(session: Session) -> bool:
    """Whether every watched table still has its trigger (a later SQLite batch migration that rebuilds
    a table drops them; without them a cached body could outlive the data)."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        query = "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
    elif dialect == "sqlite":
        query = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
    else:
        return False
    names = set(session.scalars(text(query)))
    rows = session.scalar(select(func.count()).select_from(ReadGeneration))
    return expected_triggers(dialect) <= names and rows == 1


class ReadCache:
    """Per app (tests build several apps over different databases in one process); thread-safe.

    `threads` bounds how many cached reads run at once: no more than the pool holds connections, so a
    burst queues here (cheaply, on the event loop) instead of opening and closing overflow connections
    or waking dozens of threads for work that waits on a connection anyway.
    """

    def __init__(self, max_entries: int = MAX_ENTRIES, threads: int = 10) -> None:
        self.max_entries = max_entries
        self.threads = anyio.CapacityLimiter(threads)
        self._entries: OrderedDict[Hashable, tuple[int, Rendered]] = OrderedDict()
        self._lock = threading.Lock()
        self._rendering: dict[Hashable, threading.Lock] = {}
        self._enabled: bool | None = None  # decided on first use: are the triggers there?
        self.hits = 0
        self.misses = 0

    def enabled(self, session: Session) -> bool:
        if self._enabled is None:
            self._enabled = triggers_present(session)
            if not self._enabled:
                log.warning("read_generation triggers missing: cached reads are rendered per request")
        return self._enabled

    async def run(self, work: Callable[[], T]) -> T:
        """Run the blocking part of a cached read (its database session) on a worker thread."""
        return await anyio.to_thread.run_sync(work, limiter=self.threads)

    def get_or_render(self, session: Session, key: Hashable, render: Callable[[], bytes]) -> Rendered:
        """The body for `key` as of now: from memory when the generation has not moved, else rendered.

        The generation is read before `render` reads anything, in the caller's session.
        """
        generation = read_generation(session) if self.enabled(session) else None
        if generation is None:
            return rendered(render())
        hit = self._lookup(key, generation)
        if hit is not None:
            return hit
        with self._lock:
            key_lock = self._rendering.setdefault(key, threading.Lock())
        with key_lock:  # concurrent misses of one key render it once; the others wait and reuse it
            hit = self._lookup(key, generation)
            if hit is not None:
                return hit
            result = rendered(render())
            with self._lock:
                self.misses += 1
                current = self._entries.get(key)
                if current is None or current[0] <= generation:  # never replace a newer entry
                    self._entries[key] = (generation, result)
                    self._entries.move_to_end(key)
                while len(self._entries) > self.max_entries:
                    evicted, _ = self._entries.popitem(last=False)
                    self._rendering.pop(evicted, None)
            return result

    def _lookup(self, key: Hashable, generation: int) -> Rendered | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != generation:
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[1]


def cache_of(request: Request) -> ReadCache:
    cache: ReadCache = request.app.state.read_cache
    return cache


def etag_matches(header: str | None, etag: str) -> bool:
    """RFC 9110 If-None-Match: `*` or any listed tag, compared weakly (W/ prefixes ignored)."""
    if not header:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return "*" in tags or etag in tags


def conditional(if_none_match: str | None, result: Rendered, media_type: str) -> Response:
    """200 with the body and its ETag, or 304 when the client already holds this exact body.

    `no-cache`: a client or proxy may keep the body but must revalidate it (a cheap 304) every time.
    """
    headers = {"ETag": result.etag, "Cache-Control": "private, no-cache"}
    if etag_matches(if_none_match, result.etag):
        return Response(status_code=304, headers=headers)
    return Response(result.body, media_type=media_type, headers=headers)
