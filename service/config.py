"""Settings in one place (pydantic-settings); every field can be set as TUNEBASE_<NAME>."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

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
