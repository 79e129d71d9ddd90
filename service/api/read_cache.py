"""Rendered read responses (winners list, dashboard), kept while the data behind them is unchanged.

The database holds one generation number that triggers bump in the same transaction as any insert,
update or delete on the watched tables (ReadGeneration.WATCHED, migration 0010), whoever the writer is.
A request reads the generation first (one autocommit statement that also fetches the token's grant) and
renders in a transaction begun after it, so what is stored under generation G holds every change
committed up to G (perhaps later ones too, never fewer). Every request checks the
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
from typing import TypeVar, cast

import anyio
import anyio.to_thread
from fastapi import Request, Response
from sqlalchemy import Connection, bindparam, func, select, text, true
from sqlalchemy.orm import Session, sessionmaker

from service.auth import TokenGrant, hash_token, token_grant
from service.db.models import ApiToken, ReadGeneration
from service.db.session import transaction

log = logging.getLogger(__name__)

T = TypeVar("T")
# Kept per process, least recently used evicted first: distinct filter/page combinations, and their bytes
# (a 5000-row winners page is ~2 MB; 180 rows ~70 kB; the dashboard with 180 cells ~100 kB).
MAX_ENTRIES = 256
MAX_BYTES = 64 * 2**20
# Worker threads for cached reads. Each holds the GIL only briefly around one database round trip, so a
# few keep up with ~1000 req/s; more only queue on the GIL and stretch the tail (bench/api_load.py on
# 2 shared cores: p99 48-78 ms with 4 threads, 133-259 ms with 10, at the same load).
THREADS = 4


@dataclass(frozen=True)
class Rendered:
    body: bytes
    etag: str  # strong validator: a digest of the body


def rendered(body: bytes) -> Rendered:
    return Rendered(body, '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"')


GENERATION = select(ReadGeneration.value).where(ReadGeneration.id == 1)
_GRANT = (
    select(ApiToken.id, ApiToken.name, ApiToken.scopes)
    .where(ApiToken.token_hash == bindparam("digest"), ApiToken.revoked.is_(False))
    .subquery()
)
# the generation and the presented token's grant in one round trip: the whole cost of a cached read
GENERATION_AND_GRANT = (
    select(ReadGeneration.value, _GRANT.c.id, _GRANT.c.name, _GRANT.c.scopes)
    .select_from(ReadGeneration)
    .outerjoin(_GRANT, true())
    .where(ReadGeneration.id == 1)
)


def read_generation(session: Session) -> int | None:
    """The current generation, or None when the row is missing (then nothing is cached)."""
    value = session.connection().execute(GENERATION).scalar()
    return int(value) if value is not None else None


def expected_triggers(dialect: str) -> set[str]:
    """The trigger names migration 0010 creates (one per table on Postgres, one per event on SQLite)."""
    if dialect == "postgresql":
        return {f"read_generation_{table}" for table in ReadGeneration.WATCHED}
    events = ("insert", "update", "delete")
    return {f"read_generation_{table}_{event}" for table in ReadGeneration.WATCHED for event in events}


def triggers_present(connection: Connection) -> bool:
    """Whether every watched table still has its trigger (a later SQLite batch migration that rebuilds
    a table drops them; without them a cached body could outlive the data)."""
    dialect = connection.dialect.name
    if dialect == "postgresql":
        query = "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
    elif dialect == "sqlite":
        query = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
    else:
        return False
    names = set(connection.execute(text(query)).scalars())
    rows = connection.execute(select(func.count()).select_from(ReadGeneration)).scalar()
    return expected_triggers(dialect) <= names and rows == 1


class ReadCache:
    """Per app (tests build several apps over different databases in one process); thread-safe.

    `threads` bounds how many cached reads run at once (at most the pool's connections, THREADS by
    default): a burst queues here, cheaply, on the event loop, instead of opening and closing overflow
    connections or waking dozens of threads that then contend for the GIL.
    """

    def __init__(
        self,
        factory: sessionmaker[Session],
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
        threads: int = THREADS,
    ):
        self.factory = factory
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._bytes = 0
        self.threads = anyio.CapacityLimiter(threads)
        self._entries: OrderedDict[Hashable, tuple[int, Rendered]] = OrderedDict()
        self._lock = threading.Lock()
        self._rendering: dict[Hashable, threading.Lock] = {}
        self._enabled: bool | None = None  # decided on first use: are the triggers there?
        self.hits = 0
        self.misses = 0

    async def run(self, work: Callable[[], T]) -> T:
        """Run the blocking part of a cached read on a worker thread (one hop per request)."""
        return await anyio.to_thread.run_sync(work, limiter=self.threads)

    def read(
        self,
        key: Hashable,
        token: str | None,
        admit: Callable[[TokenGrant | None], object],
        render: Callable[[Session], bytes],
    ) -> Rendered:
        """Blocking. The body for `key` as of now: from memory while the generation has not moved,
        else `render`ed in a transaction that starts after the generation was read.

        `admit` gets the presented token's grant (None: no token, unknown or revoked) and raises to
        refuse the request: a revoked token is refused on the very next request, cache or not.
        """
        generation, grant = self._check(token)
        admit(grant)
        if generation is None:
            return self._render(render)
        hit = self._lookup(key, generation)
        if hit is not None:
            return hit
        with self._lock:
            key_lock = self._rendering.setdefault(key, threading.Lock())
        with key_lock:  # concurrent misses of one key render it once; the others wait and reuse it
            hit = self._lookup(key, generation)
            if hit is not None:
                return hit
            result = self._render(render)
            with self._lock:
                self.misses += 1
                self._store(key, generation, result)
            return result

    def _store(self, key: Hashable, generation: int, result: Rendered) -> None:
        """Under self._lock. Never replaces a newer entry; evicts the least recently used past a bound."""
        current = self._entries.get(key)
        if current is not None and current[0] > generation:
            return
        if current is not None:
            self._bytes -= len(current[1].body)
        if len(result.body) > self.max_bytes:
            self._entries.pop(key, None)
            return
        self._entries[key] = (generation, result)
        self._entries.move_to_end(key)
        self._bytes += len(result.body)
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            evicted, (_, body) = self._entries.popitem(last=False)
            self._bytes -= len(body.body)
            self._rendering.pop(evicted, None)

    def _check(self, token: str | None) -> tuple[int | None, TokenGrant | None]:
        """(generation or None when caching is off, the token's grant): one autocommit statement."""
        engine = self.factory.kw["bind"]
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            if self._enabled is None:
                self._enabled = triggers_present(connection)
                if not self._enabled:
                    log.warning("read_generation triggers missing: cached reads are rendered per request")
            if not self._enabled:
                return None, token_grant(connection, token) if token is not None else None
            if token is None:
                return connection.execute(GENERATION).scalar(), None
            row = connection.execute(GENERATION_AND_GRANT, {"digest": hash_token(token)}).first()
            if row is None:  # no generation row: nothing can be cached
                return None, token_grant(connection, token)
            return int(row.value), cast(TokenGrant, row) if row.id is not None else None

    def _render(self, render: Callable[[Session], bytes]) -> Rendered:
        with transaction(self.factory) as session:
            return rendered(render(session))

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
