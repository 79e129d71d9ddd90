"""Settings in one place (pydantic-settings); every field can be set as TUNEBASE_<NAME>."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_HOME = Path("var")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TUNEBASE_", env_file=".env", extra="ignore")

    home: Path = Field(DEFAULT_HOME, description="where the embedded database, artifacts and tables live")
    database_url: str = Field("", description="SQLAlchemy URL; empty = SQLite file under home")
    broker_url: str = Field("", description="Celery broker URL; empty = embedded in-process worker")
    artifact_dir: Path | None = Field(None, description="compiled-kernel cache; default home/artifacts")
    anonymous_read: bool = Field(False, description="let requests without a token use read endpoints")
    token_bytes: int = Field(32, ge=16, le=64, description="entropy of new API tokens")
    embedded_poll_seconds: float = Field(
        0.2, gt=0, description="how often the embedded worker looks for work"
    )
    min_effect: float = Field(0.01, ge=0, description="smallest margin that counts as a decided winner")
    overlay_regret_threshold: float = Field(0.02, ge=0, description="exact entries only above this regret")
    dashboard_public: bool = Field(
        True, description="serve the read-only dashboard at / without a token (it only reads the DB)"
    )
    embedded_worker: bool = Field(
        True, description="with no broker, run tasks in-process; false = the API only queues them"
    )
    # -- distributed execution (Celery workers; DESIGN §8) --
    worker_arch: str = Field("host", description="arch whose queue `tunebase worker` consumes (arch.<arch>)")
    lease_seconds: float = Field(60, gt=0, description="a running task's lease; its worker renews it")
    heartbeat_seconds: float = Field(10, gt=0, description="how often a worker renews leases, last_seen_at")
    max_attempts: int = Field(3, ge=1, description="claims of one task before it fails with the reason")
    task_timeout_seconds: float = Field(
        1800, ge=0, description="watchdog: a longer backend call is killed, its task fails; 0 = off"
    )
    task_isolation: Literal["resident", "per-call"] = Field(
        "resident",
        description="watchdog child: one resident child per worker process reused across tasks "
        "(device context and loaded kernels kept), or a fresh child per call",
    )
    task_isolation_recycle_calls: int = Field(
        200, ge=0, description="resident watchdog child: replace it after this many calls; 0 = never"
    )
    task_isolation_max_rss_mb: int = Field(
        8192, ge=0, description="resident watchdog child: replace it when its RSS passes this (MiB); 0 = off"
    )
    reconcile_seconds: float = Field(30, gt=0, description="beat interval of the reconciler")
    requeue_lost_after_seconds: float = Field(
        60, ge=0, description="re-send a queued task when its arch queue is empty for this long after sending"
    )
    requeue_any_after_seconds: float = Field(
        3600, gt=0, description="re-send any queued task whose message is older (duplicates are no-ops)"
    )
    visibility_timeout_seconds: int = Field(
        7200, gt=0, description="Redis redelivers an unacked message after this (late acks)"
    )
    precompile: Literal["gpu", "all", "off"] = Field(
        "gpu",
        description="with a broker: one compile-queue message per unit a sweep of these arches needs "
        "(`tunebase worker --compile` builds them while GPUs time; 'all' adds host); tasks still compile "
        "whatever is missing",
    )
    nightly_cron: str = Field("0 3 * * *", description="crontab (UTC) of the nightly table regeneration")
    backend_factory: str = Field(
        "", description="'module:callable(artifact_dir) -> Backend' replacing the arch's registry backend"
    )
    # -- the API under load (connection pool, request limits) --
    db_pool_size: int = Field(10, ge=1, le=1000, description="Postgres connections kept open per process")
    db_max_overflow: int = Field(10, ge=0, le=1000, description="extra connections opened under bursts")
    db_pool_timeout: float = Field(
        10, gt=0, description="seconds a request waits for a free connection before it fails (503)"
    )
    max_body_bytes: int = Field(
        32 * 1024 * 1024, ge=1024, description="largest request body; larger ones get 413 before parsing"
    )

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'tunebase.sqlite3').resolve()}"

    @property
    def resolved_artifact_dir(self) -> Path:
        return (self.artifact_dir or self.home / "artifacts").resolve()

    @property
    def embedded(self) -> bool:
        return not self.broker_url


@lru_cache
def get_settings() -> Settings:
    return Settings()
